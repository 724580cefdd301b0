//! A producer's own state, one type for the own-protocol [`crate::Producer`] and the Kafka
//! one: its producer id and epoch, each partition's next sequence, the open transaction's
//! partitions, and the two ways a failed send leaves it (poisoned: a sequence that cannot be
//! reused; abortable: a transaction holding an unknown subset of its records). No I/O.

use std::collections::{HashMap, HashSet};

use bytes::Bytes;
use protocol::batch::{build_batch, increment_sequence, ProducerStamp};

use crate::error::ClientError;
use crate::producer::RecordMetadata;

/// A partition of a topic.
pub(crate) type TopicPartition = (String, i32);

pub(crate) struct Session {
    pub producer_id: i64,
    pub epoch: i16,
    pub sequences: HashMap<TopicPartition, i32>,
    /// The open transaction's partitions (added to it, or written); `None` outside one.
    pub txn: Option<HashSet<TopicPartition>>,
    /// A send gave up without knowing whether its batch was written: its sequence can never be
    /// reused (a retry of different records would be taken as a duplicate), so sends are
    /// refused until the epoch moves.
    pub poisoned: Option<String>,
    /// A send inside the open transaction failed: it can only be aborted.
    pub txn_failed: Option<String>,
}

impl Session {
    pub fn new(producer_id: i64, epoch: i16) -> Session {
        Session { producer_id, epoch, sequences: HashMap::new(), txn: None, poisoned: None, txn_failed: None }
    }

    /// A new producer id or epoch: sequences start over, and no batch of it can be taken for
    /// one sent under the old.
    pub fn granted(&mut self, producer_id: i64, epoch: i16) {
        self.producer_id = producer_id;
        self.epoch = epoch;
        self.sequences.clear();
        self.poisoned = None;
    }

    /// Open a transaction (a producer with a transactional id only).
    pub fn begin(&mut self, transactional: bool) -> Result<(), ClientError> {
        if !transactional {
            return Err(ClientError::Protocol("transactions need a transactional id".into()));
        }
        if self.txn.is_some() {
            return Err(ClientError::Protocol("a transaction is already open".into()));
        }
        self.txn = Some(HashSet::new());
        self.txn_failed = None;
        Ok(())
    }

    /// The open transaction ended (committed or aborted).
    pub fn ended(&mut self) {
        self.txn = None;
        self.txn_failed = None;
    }

    /// Refused with [`ClientError::Abortable`] if a send in the open transaction failed.
    pub fn refuse_if_abortable(&self) -> Result<(), ClientError> {
        match (&self.txn_failed, self.txn.is_some()) {
            (Some(why), true) => Err(ClientError::Abortable(why.clone())),
            _ => Ok(()),
        }
    }

    /// A send inside the open transaction failed (other than by a fence, which ends the
    /// producer): the transaction can only be aborted.
    pub fn note_sent(&mut self, topic: &str, partition: i32, sent: &Result<RecordMetadata, ClientError>) {
        if let Err(e) = sent {
            if self.txn.is_some() && !e.is_fenced() {
                self.txn_failed = Some(format!("sending to {topic}-{partition}: {e}"));
            }
        }
    }

    /// Refused while poisoned (`remedy` says what to do).
    pub fn refuse_if_poisoned(&self, remedy: &str) -> Result<(), ClientError> {
        match &self.poisoned {
            Some(why) => Err(ClientError::Protocol(format!("this producer cannot send again: {why}; {remedy}"))),
            None => Ok(()),
        }
    }

    /// The next batch of `values` to `topic-partition`, and its base sequence.
    pub fn next_batch(&self, topic: &str, partition: i32, values: &[Bytes]) -> (i32, Bytes) {
        let seq = self.sequences.get(&(topic.to_string(), partition)).copied().unwrap_or(0);
        let now_ms =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
        let stamp = ProducerStamp { producer_id: self.producer_id, producer_epoch: self.epoch, base_sequence: seq };
        (seq, build_batch(stamp, self.txn.is_some(), now_ms, values))
    }

    /// The batch at `seq` of `records` records was acknowledged.
    pub fn acked(&mut self, topic: &str, partition: i32, seq: i32, records: usize) {
        self.sequences.insert((topic.to_string(), partition), increment_sequence(seq, records as i32));
    }
}
