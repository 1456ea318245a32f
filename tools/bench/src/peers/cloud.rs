//! The peers on S3 and DynamoDB, where nobody pushes a wake-up: waiters poll.
//!
//! - [`S3ListLock`]: the seed GitHub Action's algorithm, from its README ("Implementation
//!   Details"): put `NAME.CREATED.UUID.EXPIRES`, list the objects of NAME, drop the expired,
//!   sort; the oldest wins; a loser deletes its object, sleeps a poll and starts again with a new
//!   name (so it loses its place). Object names here use `/` after NAME instead of `.`, which
//!   object_store lists as a directory; the algorithm is the same.
//! - [`DynamoPut`]: `PutItem` with `attribute_not_exists` (or an expired holder), released by a
//!   `DeleteItem` conditioned on the owner's token; a waiter retries after a sleep.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::{Context, Result};
use async_trait::async_trait;
use aws_sdk_dynamodb::types::AttributeValue;
use object_store::path::Path;
use object_store::ObjectStore;

use super::contenders::{token, Contender, Locker};
use crate::setup::realtime_ns;

/// Milliseconds since the epoch (the seed's time values).
fn now_ms() -> u128 {
    realtime_ns() / 1_000_000
}

/// The seed Action's S3 lock on one bucket.
pub struct S3ListLock {
    /// The bucket.
    pub bucket: String,
    /// Object names start with this (the baton store's prefix, plus `peers/`).
    pub prefix: String,
    /// How long an object counts (the seed's `expires`).
    pub expires: Duration,
    /// The sleep after a lost round (the seed's `timeout-poll`, 5 s by default).
    pub poll: Duration,
}

struct S3ListLocker {
    store: object_store::aws::AmazonS3,
    prefix: String,
    expires: Duration,
    poll: Duration,
    held: HashMap<String, Path>,
    requests: u64,
}

/// An object_store client for `bucket` on the endpoint the AWS variables name (moto's, in
/// the scripts), with their credentials and region.
fn s3_client(bucket: &str) -> Result<object_store::aws::AmazonS3> {
    let mut builder = object_store::aws::AmazonS3Builder::from_env().with_bucket_name(bucket);
    if let Ok(endpoint) = std::env::var("AWS_ENDPOINT_URL") {
        builder = builder
            .with_allow_http(endpoint.starts_with("http://"))
            .with_endpoint(endpoint);
    }
    builder
        .build()
        .with_context(|| format!("cannot build an S3 client for the bucket {bucket}"))
}

#[async_trait]
impl Contender for S3ListLock {
    fn name(&self) -> String {
        format!(
            "S3 list lock, poll {}",
            humantime::format_duration(self.poll)
        )
    }

    async fn client(&self) -> Result<Box<dyn Locker>> {
        Ok(Box::new(S3ListLocker {
            store: s3_client(&self.bucket)?,
            prefix: self.prefix.clone(),
            expires: self.expires,
            poll: self.poll,
            held: HashMap::new(),
            requests: 0,
        }))
    }
}

impl S3ListLocker {
    /// One attempt: put our object, list, and whether ours is the oldest live one. A loser's
    /// object is deleted before this returns.
    async fn attempt(&mut self, dir: &Path) -> Result<Option<Path>> {
        let created = now_ms();
        let expires = created + self.expires.as_millis();
        let ours = dir.child(format!("{created:013}.{}.{expires:013}", token()));
        self.requests += 1;
        self.store
            .put(&ours, Vec::<u8>::new().into())
            .await
            .context("S3 put of the lock object")?;
        self.requests += 1;
        let listed = self
            .store
            .list_with_delimiter(Some(dir))
            .await
            .context("S3 list of the lock objects")?;
        let now = now_ms();
        let mut live: Vec<String> = listed
            .objects
            .iter()
            .filter_map(|object| object.location.filename().map(str::to_string))
            .filter(|name| expires_ms(name).is_some_and(|expires| expires > now))
            .collect();
        live.sort();
        if live.first().map(String::as_str) == ours.filename() {
            return Ok(Some(ours));
        }
        self.requests += 1;
        self.store
            .delete(&ours)
            .await
            .context("S3 delete of a losing lock object")?;
        Ok(None)
    }
}

/// The EXPIRES part of `CREATED.UUID.EXPIRES`.
fn expires_ms(name: &str) -> Option<u128> {
    name.rsplit('.').next()?.parse().ok()
}

#[async_trait]
impl Locker for S3ListLocker {
    async fn lock(&mut self, key: &str) -> Result<()> {
        let dir = Path::from(format!("{}/{key}", self.prefix));
        loop {
            if let Some(ours) = self.attempt(&dir).await? {
                self.held.insert(key.to_string(), ours);
                return Ok(());
            }
            tokio::time::sleep(self.poll).await;
        }
    }

    async fn unlock(&mut self, key: &str) -> Result<()> {
        let ours = self
            .held
            .remove(key)
            .with_context(|| format!("S3: {key} is not held"))?;
        self.requests += 1;
        self.store
            .delete(&ours)
            .await
            .context("S3 delete of the lock object")?;
        Ok(())
    }

    fn requests(&self) -> u64 {
        self.requests
    }
}

/// A DynamoDB conditional put on the baton table, in a partition of its own.
pub struct DynamoPut {
    /// The table (the baton store's).
    pub table: String,
    /// How long a holder's item counts (a crashed holder's is taken over after it).
    pub ttl: Duration,
    /// The sleep between two attempts of a waiter.
    pub retry: Duration,
}

struct DynamoLocker {
    client: aws_sdk_dynamodb::Client,
    table: String,
    ttl: Duration,
    retry: Duration,
    tokens: HashMap<String, String>,
    requests: u64,
}

/// The partition of the peer's items: baton's records never use it.
const PARTITION: &str = "bench-peer-lock";

#[async_trait]
impl Contender for DynamoPut {
    fn name(&self) -> String {
        format!(
            "PutItem attribute_not_exists, retry {}",
            humantime::format_duration(self.retry)
        )
    }

    async fn client(&self) -> Result<Box<dyn Locker>> {
        let config = baton_store::aws::sdk_config().await;
        Ok(Box::new(DynamoLocker {
            client: aws_sdk_dynamodb::Client::new(&config),
            table: self.table.clone(),
            ttl: self.ttl,
            retry: self.retry,
            tokens: HashMap::new(),
            requests: 0,
        }))
    }
}

#[async_trait]
impl Locker for DynamoLocker {
    async fn lock(&mut self, key: &str) -> Result<()> {
        let token = token();
        loop {
            let now = now_ms();
            self.requests += 1;
            let put = self
                .client
                .put_item()
                .table_name(&self.table)
                .item("pk", AttributeValue::S(PARTITION.into()))
                .item("sk", AttributeValue::S(key.into()))
                .item("o", AttributeValue::S(token.clone()))
                .item(
                    "x",
                    AttributeValue::N((now + self.ttl.as_millis()).to_string()),
                )
                .condition_expression("attribute_not_exists(pk) OR x < :now")
                .expression_attribute_values(":now", AttributeValue::N(now.to_string()))
                .send()
                .await;
            match put {
                Ok(_) => {
                    self.tokens.insert(key.to_string(), token);
                    return Ok(());
                }
                Err(error)
                    if error
                        .as_service_error()
                        .is_some_and(|e| e.is_conditional_check_failed_exception()) =>
                {
                    tokio::time::sleep(self.retry).await;
                }
                Err(error) => {
                    return Err(anyhow::Error::new(error).context("DynamoDB PutItem"));
                }
            }
        }
    }

    async fn unlock(&mut self, key: &str) -> Result<()> {
        let token = self
            .tokens
            .remove(key)
            .with_context(|| format!("DynamoDB: {key} is not held"))?;
        self.requests += 1;
        self.client
            .delete_item()
            .table_name(&self.table)
            .key("pk", AttributeValue::S(PARTITION.into()))
            .key("sk", AttributeValue::S(key.into()))
            .condition_expression("o = :o")
            .expression_attribute_values(":o", AttributeValue::S(token))
            .send()
            .await
            .map_err(anyhow::Error::new)
            .context("DynamoDB DeleteItem (had the item expired and been taken?)")?;
        Ok(())
    }

    fn requests(&self) -> u64 {
        self.requests
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiry_is_the_last_part() {
        assert_eq!(
            expires_ms("1764115200000.123-4-5.1764115260000"),
            Some(1_764_115_260_000)
        );
        assert_eq!(expires_ms("garbage"), None);
    }
}
