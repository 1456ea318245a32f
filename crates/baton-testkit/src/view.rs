//! `baton status --json`, read in one place, so a change of field names is one edit here.

use serde_json::Value;

/// One key in `baton status --json`.
#[derive(Debug, Clone)]
pub struct KeyView {
    pub raw: Value,
}

impl KeyView {
    pub fn holders(&self) -> Vec<TicketView> {
        self.tickets("holders")
    }

    /// The queue, in grant order.
    pub fn queue(&self) -> Vec<TicketView> {
        let queue = self.tickets("queue");
        // Positions, where given, must agree with the array's order.
        let positions: Vec<u64> = queue
            .iter()
            .filter_map(|ticket| ticket.raw.get("position").and_then(Value::as_u64))
            .collect();
        if positions.len() == queue.len() {
            assert!(
                positions.windows(2).all(|pair| pair[0] < pair[1]),
                "queue positions disagree with the queue's order: {}",
                self.raw
            );
        }
        queue
    }

    pub fn queue_contexts(&self) -> Vec<String> {
        self.queue()
            .into_iter()
            .map(|ticket| ticket.context)
            .collect()
    }

    pub fn holder_contexts(&self) -> Vec<String> {
        let mut contexts: Vec<String> = self
            .holders()
            .into_iter()
            .map(|ticket| ticket.context)
            .collect();
        contexts.sort();
        contexts
    }

    pub fn limit(&self) -> Option<u64> {
        self.raw.get("limit").and_then(Value::as_u64)
    }

    /// The key's latest fence.
    pub fn fence(&self) -> Option<u64> {
        self.raw.get("fence").and_then(as_u64_lenient)
    }

    pub fn last_outcome(&self) -> Option<String> {
        let value = self.raw.get("last_outcome")?;
        match value {
            Value::String(text) => Some(text.clone()),
            // An object such as {"outcome": "failed", ...}.
            Value::Object(map) => map
                .get("outcome")
                .and_then(Value::as_str)
                .map(str::to_owned),
            _ => None,
        }
    }

    fn tickets(&self, field: &str) -> Vec<TicketView> {
        match self.raw.get(field) {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => items.iter().map(TicketView::new).collect(),
            Some(other) => panic!("status field `{field}` is not an array: {other}"),
        }
    }
}

/// A fence may be printed as a number or (to keep 64 bits exact in JavaScript) as a string.
pub fn as_u64_lenient(value: &Value) -> Option<u64> {
    value
        .as_u64()
        .or_else(|| value.as_str().and_then(|text| text.parse().ok()))
}

/// One ticket in `baton status --json`.
#[derive(Debug, Clone)]
pub struct TicketView {
    pub id: String,
    pub context: String,
    pub mode: String,
    pub raw: Value,
}

impl TicketView {
    fn new(raw: &Value) -> TicketView {
        let text = |field: &str| {
            raw.get(field)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        TicketView {
            id: text("id"),
            context: text("context"),
            mode: text("mode"),
            raw: raw.clone(),
        }
    }

    pub fn lease_left_ms(&self) -> Option<u64> {
        self.raw.get("lease_left_ms").and_then(Value::as_u64)
    }
}
