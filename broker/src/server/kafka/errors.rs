//! Error codes as Kafka sends them, per request and version.
//!
//! epochfence's codes are Kafka's numbers; what differs is which code a client of a given
//! request version understands, and which errors Kafka never puts on a request because of how
//! its client would react (kafka-wire.md, section 2). A stale producer must get the error that
//! makes its client raise a fatal fenced error, and a retriable condition must never look fatal.

use kafka_protocol::messages::ApiKey;
use protocol::ErrorCode;

/// The code to send for `code` in the answer to a `key` request of `version`.
pub(crate) fn kafka_code(code: ErrorCode, key: ApiKey, version: i16) -> i16 {
    use ErrorCode as E;
    let mapped = match (key, code) {
        // Produce never carries PRODUCER_FENCED: a leader's verification that the coordinator
        // refused as fenced is INVALID_PRODUCER_EPOCH, which makes librdkafka raise a fatal
        // fenced error and kafka-python ask its coordinator (which then answers fenced).
        (ApiKey::Produce, E::ProducerFenced) => E::InvalidProducerEpoch,
        // Under transaction version 2 (Produce v12) the write adds its partition, and Kafka
        // answers a transaction still ending with CONCURRENT_TRANSACTIONS, which those clients
        // retry (KAFKA-18575).
        (ApiKey::Produce, E::ConcurrentTransactions) if version >= 12 => E::ConcurrentTransactions,
        // A verification that could not be made now: Kafka sends NOT_ENOUGH_REPLICAS, which
        // clients retry without refreshing metadata (librdkafka takes an unexpected
        // CONCURRENT_TRANSACTIONS on Produce as abortable).
        (
            ApiKey::Produce,
            E::ConcurrentTransactions
            | E::CoordinatorNotAvailable
            | E::NotCoordinator
            | E::TransactionCoordinatorFenced,
        ) => E::NotEnoughReplicas,
        // A coordinator replica that is not the active one: the broker is the Kafka client's
        // coordinator and follows the active replica itself, so to the client it is only
        // not available yet (a takeover in progress).
        (_, E::NotCoordinator | E::TransactionCoordinatorFenced) => E::CoordinatorNotAvailable,
        // INVALID_RECORD came with Produce v8 (KIP-467); before, a bad record is corrupt.
        (ApiKey::Produce, E::InvalidRecord) if version < 8 => E::CorruptMessage,
        // PRODUCER_FENCED came with these versions (KIP-588): older clients know the fence as
        // INVALID_PRODUCER_EPOCH (librdkafka's AddPartitionsToTxn v0 treats only that as fatal).
        (ApiKey::InitProducerId, E::ProducerFenced) if version < 4 => E::InvalidProducerEpoch,
        (ApiKey::AddPartitionsToTxn | ApiKey::EndTxn | ApiKey::AddOffsetsToTxn, E::ProducerFenced) if version < 2 => {
            E::InvalidProducerEpoch
        }
        // TxnOffsetCommit has no PRODUCER_FENCED in Kafka's transaction version 1 (its group
        // coordinator does not check the epoch); INVALID_PRODUCER_EPOCH is what both clients
        // raise as fenced there.
        (ApiKey::TxnOffsetCommit, E::ProducerFenced) => E::InvalidProducerEpoch,
        // The group's generation and member fields came with TxnOffsetCommit v3 (KIP-447) and
        // static members with v3 too: older clients cannot meet these.
        (ApiKey::TxnOffsetCommit, E::FencedInstanceId) if version < 3 => E::UnknownMemberId,
        // Static membership (KIP-345) came with these versions.
        (ApiKey::JoinGroup, E::FencedInstanceId) if version < 5 => E::UnknownMemberId,
        (ApiKey::SyncGroup | ApiKey::Heartbeat, E::FencedInstanceId) if version < 3 => E::UnknownMemberId,
        (ApiKey::OffsetCommit, E::FencedInstanceId) if version < 7 => E::UnknownMemberId,
        (ApiKey::LeaveGroup, E::FencedInstanceId) if version < 3 => E::UnknownMemberId,
        // UNSTABLE_OFFSET_COMMIT came with OffsetFetch v7 (require_stable).
        (ApiKey::OffsetFetch, E::UnstableOffsetCommit) if version < 7 => E::CoordinatorLoadInProgress,
        (_, code) => code,
    };
    mapped.code()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fenced_producers_get_the_code_their_client_version_raises_as_fenced() {
        let fenced = ErrorCode::ProducerFenced;
        assert_eq!(kafka_code(fenced, ApiKey::Produce, 10), 47, "never PRODUCER_FENCED on Produce");
        assert_eq!(kafka_code(fenced, ApiKey::InitProducerId, 3), 47);
        assert_eq!(kafka_code(fenced, ApiKey::InitProducerId, 4), 90);
        assert_eq!(kafka_code(fenced, ApiKey::AddPartitionsToTxn, 0), 47, "librdkafka sends v0");
        assert_eq!(kafka_code(fenced, ApiKey::AddPartitionsToTxn, 3), 90);
        assert_eq!(kafka_code(fenced, ApiKey::EndTxn, 1), 47);
        assert_eq!(kafka_code(fenced, ApiKey::EndTxn, 3), 90);
        assert_eq!(kafka_code(ErrorCode::InvalidProducerEpoch, ApiKey::Produce, 9), 47);
    }

    #[test]
    fn a_verification_not_made_now_is_retriable_on_produce() {
        for code in [ErrorCode::ConcurrentTransactions, ErrorCode::CoordinatorNotAvailable] {
            assert_eq!(kafka_code(code, ApiKey::Produce, 9), ErrorCode::NotEnoughReplicas.code());
            assert_eq!(kafka_code(code, ApiKey::InitProducerId, 4), code.code(), "retried there as it is");
        }
        assert_eq!(kafka_code(ErrorCode::InvalidTxnState, ApiKey::Produce, 9), 48, "stays");
        let concurrent = ErrorCode::ConcurrentTransactions;
        assert_eq!(kafka_code(concurrent, ApiKey::Produce, 12), 51, "transaction version 2 retries it as it is");
        assert_eq!(kafka_code(ErrorCode::NotCoordinator, ApiKey::Produce, 9), ErrorCode::NotEnoughReplicas.code());
        assert_eq!(kafka_code(ErrorCode::NotCoordinator, ApiKey::InitProducerId, 4), 15, "a takeover in progress");
    }

    #[test]
    fn invalid_record_is_corrupt_message_before_produce_v8() {
        assert_eq!(kafka_code(ErrorCode::InvalidRecord, ApiKey::Produce, 7), 2);
        assert_eq!(kafka_code(ErrorCode::InvalidRecord, ApiKey::Produce, 8), 87);
    }
}
