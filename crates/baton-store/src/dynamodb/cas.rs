//! The CAS of a key's hot item, in the steps every store's `cas_due` takes: what the expected
//! version stands for (the cached or read record, or a conflict found without writing), the
//! conditional write, and what its answer means.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::Arc;

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::put_item::{PutItemError, PutItemOutput};
use aws_sdk_dynamodb::types::{
    AttributeValue, ReturnConsumedCapacity, ReturnValuesOnConditionCheckFailure,
};

use super::errors::{classify, Effect};
use super::layout::{self, PK, VERSION};
use super::{Current, DynamoStore};
use crate::{CasOutcome, Result, Version};

/// A `PutItem`'s answer, as the SDK gives it.
type PutAnswer = std::result::Result<PutItemOutput, SdkError<PutItemError>>;

impl DynamoStore {
    /// The record a CAS naming `expected` plans from: none for a create, else the cached
    /// record if it has that version, else the one read. A stale version (or one this store
    /// never handed out) breaks with the conflict to answer, with no write needed.
    pub(super) async fn resolve_expected(
        &self,
        key: &str,
        expected: Option<&Version>,
    ) -> Result<ControlFlow<CasOutcome, Option<Arc<Current>>>> {
        let Some(expected) = expected else {
            return Ok(ControlFlow::Continue(None));
        };
        if let Some(cached) = self.cache_get(key) {
            if cached.version == *expected {
                return Ok(ControlFlow::Continue(Some(cached)));
            }
        }
        Ok(match self.read_hot(key).await? {
            Some(current) if current.version == *expected => ControlFlow::Continue(Some(current)),
            other => ControlFlow::Break(CasOutcome::Conflict {
                current: other.map(|current| current.versioned()),
            }),
        })
    }

    /// Puts the hot item, on condition that the key has no item (`expected` is `None`) or one
    /// of version `expected`; a refusal carries the item found.
    pub(super) async fn put_hot(
        &self,
        item: HashMap<String, AttributeValue>,
        expected: Option<&Version>,
    ) -> PutAnswer {
        let request = self
            .inner
            .client
            .put_item()
            .table_name(&self.inner.table)
            .set_item(Some(item))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .return_consumed_capacity(ReturnConsumedCapacity::Total);
        let request = match expected {
            None => request
                .condition_expression("attribute_not_exists(#pk)")
                .expression_attribute_names("#pk", PK),
            Some(expected) => request
                .condition_expression("#v = :v")
                .expression_attribute_names("#v", VERSION)
                .expression_attribute_values(":v", AttributeValue::S(expected.0.clone())),
        };
        request.send().await
    }

    /// What the put of `written` (replacing an item of `old_bytes`) came to: written
    /// (counted and cached), or a conflict with the item found.
    pub(super) fn outcome_of_write(
        &self,
        key: &str,
        answer: PutAnswer,
        written: Current,
        old_bytes: usize,
    ) -> Result<CasOutcome> {
        match answer {
            Ok(output) => {
                let reported = output
                    .consumed_capacity()
                    .and_then(|capacity| capacity.capacity_units())
                    .unwrap_or(0.0);
                self.count_units(
                    "hot item",
                    reported,
                    layout::write_units(written.item_bytes.max(old_bytes)),
                );
                let version = written.version.clone();
                self.cache_put(key, Arc::new(written));
                Ok(CasOutcome::Written { version })
            }
            Err(error) => self.outcome_of_refusal(key, error, written.version),
        }
    }

    /// A put that failed: a refused condition is a conflict with the item found (or our own
    /// write, retried by the SDK after it had succeeded); anything else is an error.
    fn outcome_of_refusal(
        &self,
        key: &str,
        error: SdkError<PutItemError>,
        version: Version,
    ) -> Result<CasOutcome> {
        let failed_check = error.as_service_error().and_then(|service| match service {
            PutItemError::ConditionalCheckFailedException(failed) => Some(failed.item().cloned()),
            _ => None,
        });
        let Some(old_item) = failed_check else {
            self.cache_forget(key);
            return Err(classify(
                self.context("dynamodb:PutItem", Effect::Write),
                error,
            ));
        };
        let Some(old_item) = old_item else {
            // Only a CAS naming a version finds no item: the key has no record.
            self.count_units("refused hot item", 0.0, 1);
            self.cache_forget(key);
            return Ok(CasOutcome::Conflict { current: None });
        };
        let current = self.parse_current(&old_item)?;
        self.count_units(
            "refused hot item",
            0.0,
            layout::write_units(current.item_bytes),
        );
        if current.version == version {
            // The SDK retried a write that had succeeded: this is our own record.
            let current = Arc::new(current);
            self.cache_put(key, current);
            return Ok(CasOutcome::Written { version });
        }
        let versioned = current.versioned();
        self.cache_put(key, Arc::new(current));
        Ok(CasOutcome::Conflict {
            current: Some(versioned),
        })
    }
}
