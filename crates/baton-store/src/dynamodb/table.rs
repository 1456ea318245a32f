//! `baton init` for DynamoDB: create the table (on-demand billing) and wait until it is active.
//!
//! This is the only place baton creates anything in DynamoDB. Normal use needs no
//! `dynamodb:CreateTable`: `open` assumes the table exists and an operation on a missing table
//! says to run `baton init`. Creating is idempotent: an existing table with baton's key schema
//! is fine, and so is one that another `baton init` is creating at the same moment.

use std::time::{Duration, Instant};

use aws_sdk_dynamodb::error::ProvideErrorMetadata;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
    TableDescription, TableStatus, TimeToLiveSpecification, TimeToLiveStatus,
};
use aws_sdk_dynamodb::Client;

use super::errors::{classify, Context, Effect};
use super::layout::{EXPIRES, PK, SK};
use crate::{Result, StoreError};

/// How long a new table may take to become active (seconds on AWS, at once on local servers).
const ACTIVE_WITHIN: Duration = Duration::from_secs(300);

/// How often to look while waiting for it.
const POLL_EVERY: Duration = Duration::from_millis(500);

/// Creates `table` unless it exists, waits until it is active, and says what it did.
pub async fn ensure(client: &Client, store: &str, table: &str) -> Result<String> {
    let context = |action| Context {
        store,
        table,
        action,
        effect: Effect::Read,
    };
    let created = match describe(client, store, table).await? {
        Some(existing) => {
            check_schema(&existing, store, table)?;
            false
        }
        None => {
            let request = client
                .create_table()
                .table_name(table)
                .billing_mode(BillingMode::PayPerRequest)
                .attribute_definitions(attribute(PK, store)?)
                .attribute_definitions(attribute(SK, store)?)
                .key_schema(key_element(PK, KeyType::Hash, store)?)
                .key_schema(key_element(SK, KeyType::Range, store)?)
                .send()
                .await;
            match request {
                Ok(_) => true,
                // Another `baton init` got there first: wait for its table like for ours.
                Err(error)
                    if error.as_service_error().and_then(|e| e.code())
                        == Some("ResourceInUseException") =>
                {
                    false
                }
                Err(error) => return Err(classify(context("dynamodb:CreateTable"), error)),
            }
        }
    };
    let description = wait_active(client, store, table).await?;
    check_schema(&description, store, table)?;
    let billing = match description
        .billing_mode_summary()
        .and_then(|summary| summary.billing_mode())
    {
        Some(BillingMode::Provisioned) => "provisioned capacity",
        _ => "on-demand billing",
    };
    let arn = description.table_arn().unwrap_or(table);
    Ok(if created {
        format!("created the DynamoDB table {arn} ({billing}); it is active")
    } else {
        format!("the DynamoDB table {arn} exists with baton's key schema ({billing}) and is active; nothing to do")
    })
}

/// Enables the table's TTL on baton's expiry attribute unless it is, and says what it did. A
/// table whose TTL is on another attribute is left alone, with what to do: DynamoDB allows one
/// TTL attribute per table.
pub async fn ensure_expiry(client: &Client, store: &str, table: &str) -> Result<String> {
    let context = |action| Context {
        store,
        table,
        action,
        effect: Effect::Read,
    };
    let described = client
        .describe_time_to_live()
        .table_name(table)
        .send()
        .await
        .map_err(|error| classify(context("dynamodb:DescribeTimeToLive"), error))?;
    let current = described.time_to_live_description();
    let status = current.and_then(|d| d.time_to_live_status()).cloned();
    let attribute = current.and_then(|d| d.attribute_name()).unwrap_or_default();
    let on = matches!(
        status,
        Some(TimeToLiveStatus::Enabled | TimeToLiveStatus::Enabling)
    );
    if on && attribute == EXPIRES {
        return Ok(format!(
            "TTL is on for attribute `{EXPIRES}`; nothing to do"
        ));
    }
    if on {
        return Err(StoreError::Incompatible {
            store: store.to_owned(),
            reason: format!(
                "the table's TTL is on attribute `{attribute}`, and baton's history expires by \
                 attribute `{EXPIRES}` (a table has one TTL attribute): use a table of its own \
                 for baton"
            ),
        });
    }
    let specification = TimeToLiveSpecification::builder()
        .enabled(true)
        .attribute_name(EXPIRES)
        .build()
        .map_err(|error| StoreError::Backend {
            store: store.to_owned(),
            source: Box::new(error),
        })?;
    client
        .update_time_to_live()
        .table_name(table)
        .time_to_live_specification(specification)
        .send()
        .await
        .map_err(|error| classify(context("dynamodb:UpdateTimeToLive"), error))?;
    Ok(format!("turned TTL on for attribute `{EXPIRES}`"))
}

/// The table's description, or `None` when it does not exist.
async fn describe(client: &Client, store: &str, table: &str) -> Result<Option<TableDescription>> {
    match client.describe_table().table_name(table).send().await {
        Ok(output) => Ok(output.table),
        Err(error)
            if error.as_service_error().and_then(|e| e.code())
                == Some("ResourceNotFoundException") =>
        {
            Ok(None)
        }
        Err(error) => Err(classify(
            Context {
                store,
                table,
                action: "dynamodb:DescribeTable",
                effect: Effect::Read,
            },
            error,
        )),
    }
}

/// Polls until the table is `ACTIVE`.
async fn wait_active(client: &Client, store: &str, table: &str) -> Result<TableDescription> {
    let started = Instant::now();
    loop {
        let description = describe(client, store, table).await?;
        let status = description.as_ref().and_then(|d| d.table_status()).cloned();
        match (description, &status) {
            (Some(description), Some(TableStatus::Active)) => return Ok(description),
            (_, Some(TableStatus::Deleting)) => {
                return Err(StoreError::Unusable {
                    store: store.to_owned(),
                    reason: format!(
                    "the table `{table}` is being deleted; run `baton init` again once it is gone"
                ),
                })
            }
            _ if started.elapsed() > ACTIVE_WITHIN => {
                return Err(StoreError::Unavailable {
                    store: store.to_owned(),
                    reason: format!(
                        "the table `{table}` was not active after {} s (status {:?}); look at it \
                         in the AWS console and run `baton init` again",
                        ACTIVE_WITHIN.as_secs(),
                        status.as_ref().map(TableStatus::as_str)
                    ),
                })
            }
            _ => tokio::time::sleep(POLL_EVERY).await,
        }
    }
}

/// Refuses a table whose key schema is not baton's: its items would not be found, or writes
/// would fail on every key.
fn check_schema(description: &TableDescription, store: &str, table: &str) -> Result<()> {
    let key_type = |name: &str| {
        description
            .key_schema()
            .iter()
            .find(|element| element.attribute_name() == name)
            .map(|element| element.key_type().clone())
    };
    let attribute_type = |name: &str| {
        description
            .attribute_definitions()
            .iter()
            .find(|definition| definition.attribute_name() == name)
            .map(|definition| definition.attribute_type().clone())
    };
    let is_baton = description.key_schema().len() == 2
        && key_type(PK) == Some(KeyType::Hash)
        && key_type(SK) == Some(KeyType::Range)
        && attribute_type(PK) == Some(ScalarAttributeType::S)
        && attribute_type(SK) == Some(ScalarAttributeType::S);
    if is_baton {
        return Ok(());
    }
    let found: Vec<String> = description
        .key_schema()
        .iter()
        .map(|element| {
            format!(
                "{} ({}, {})",
                element.attribute_name(),
                element.key_type().as_str(),
                attribute_type(element.attribute_name()).map_or("?", |kind| match kind {
                    ScalarAttributeType::S => "string",
                    ScalarAttributeType::N => "number",
                    ScalarAttributeType::B => "binary",
                    _ => "?",
                })
            )
        })
        .collect();
    Err(StoreError::Incompatible {
        store: store.to_owned(),
        reason: format!(
            "the table `{table}` exists with key schema [{}], but baton needs `{PK}` (string, \
             partition key) and `{SK}` (string, sort key); give baton a table of its own \
             (dynamodb://ANOTHER_NAME)",
            found.join(", ")
        ),
    })
}

fn attribute(name: &str, store: &str) -> Result<AttributeDefinition> {
    AttributeDefinition::builder()
        .attribute_name(name)
        .attribute_type(ScalarAttributeType::S)
        .build()
        .map_err(|error| build_error(store, error))
}

fn key_element(name: &str, key_type: KeyType, store: &str) -> Result<KeySchemaElement> {
    KeySchemaElement::builder()
        .attribute_name(name)
        .key_type(key_type)
        .build()
        .map_err(|error| build_error(store, error))
}

fn build_error(store: &str, error: impl std::error::Error + Send + Sync + 'static) -> StoreError {
    StoreError::Backend {
        store: store.to_owned(),
        source: Box::new(error),
    }
}
