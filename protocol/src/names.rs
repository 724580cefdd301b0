//! Validation of names that arrive from clients.

/// Longest topic name, in bytes (Kafka's limit).
pub const TOPIC_NAME_BYTES_MAX: usize = 249;
/// Longest transactional id, in bytes.
pub const TRANSACTIONAL_ID_BYTES_MAX: usize = 249;

/// Names no topic may have: Kafka's internal topics, and its metadata log. The coordinator
/// keeps group offsets and transactions itself, but a client that sees one of these names
/// treats it as Kafka's own, and epochfence once used the first for a transaction's group
/// offsets: creating them is refused, Metadata never auto-creates them, and a produce to one
/// (left in a data directory from before) is refused.
pub const RESERVED_TOPICS: [&str; 4] =
    ["__consumer_offsets", "__transaction_state", "__share_group_state", "__cluster_metadata"];

/// Whether `name` is one of the [`RESERVED_TOPICS`].
pub fn is_reserved_topic(name: &str) -> bool {
    RESERVED_TOPICS.contains(&name)
}

/// Why a reserved name cannot be created, in Kafka's controller's words.
pub fn reserved_topic_refusal(name: &str) -> String {
    format!("Creation of internal topic {name} is prohibited.")
}

/// `Err(reason)` unless `name` is 1..=249 bytes of `[A-Za-z0-9._-]` and not `.` or `..`.
pub fn validate_topic(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("topic name is empty".into());
    }
    if name.len() > TOPIC_NAME_BYTES_MAX {
        return Err(format!("topic name is {} bytes, the limit is {TOPIC_NAME_BYTES_MAX}", name.len()));
    }
    if name == "." || name == ".." {
        return Err(format!("topic name '{name}' is reserved"));
    }
    if let Some(c) = name.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))) {
        return Err(format!("topic name contains {c:?}; use only letters, digits, '.', '_' and '-'"));
    }
    Ok(())
}

/// `Err(reason)` unless `id` is 1..=249 bytes with no control characters.
pub fn validate_transactional_id(id: &str) -> Result<(), String> {
    if id.is_empty() {
        return Err("transactional id is empty; omit it for an idempotent-only producer".into());
    }
    if id.len() > TRANSACTIONAL_ID_BYTES_MAX {
        return Err(format!("transactional id is {} bytes, the limit is {TRANSACTIONAL_ID_BYTES_MAX}", id.len()));
    }
    if id.chars().any(char::is_control) {
        return Err("transactional id contains control characters".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_names() {
        assert!(validate_topic("orders-1.v2_x").is_ok());
        assert!(validate_topic("").is_err());
        assert!(validate_topic("..").is_err());
        assert!(validate_topic("a b").is_err());
        assert!(validate_topic(&"x".repeat(250)).is_err());
        assert!(is_reserved_topic("__consumer_offsets") && is_reserved_topic("__cluster_metadata"));
        assert!(!is_reserved_topic("__consumer_offsets2") && !is_reserved_topic("_consumer_offsets"));
    }

    #[test]
    fn transactional_ids() {
        assert!(validate_transactional_id("orders").is_ok());
        assert!(validate_transactional_id("").is_err());
        assert!(validate_transactional_id("a\nb").is_err());
    }
}
