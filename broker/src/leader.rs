//! Leader-epoch checks: plain rules, no I/O.
//!
//! Every request that reads or writes a partition carries the leader epoch its sender believes
//! in. Lower than this replica's: the sender is stale (FENCED_LEADER_EPOCH). Higher: this
//! replica is behind and catches up from the coordinator (UNKNOWN_LEADER_EPOCH).

use protocol::ErrorCode;

/// What this broker believes about one partition's leadership.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Leadership {
    /// Whether this broker leads the partition.
    pub is_leader: bool,
    /// The leader's broker id (-1 if none) at `leader_epoch`.
    pub leader_id: i32,
    /// The newest leader epoch this broker has learnt for the partition.
    pub leader_epoch: i32,
}

/// A request's leader epoch does not match.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LeaderEpochError {
    /// The caller's epoch is older: it is stale and must refresh its metadata.
    #[error("leader epoch {got} is older than the partition's {current}: the sender is stale, refresh metadata")]
    Fenced {
        /// The partition's epoch here.
        current: i32,
        /// The request's.
        got: i32,
    },
    /// The caller's epoch is newer: this broker has not learnt it yet.
    #[error("leader epoch {got} is newer than this broker's {current}: it is catching up, retry")]
    Unknown {
        /// The partition's epoch here.
        current: i32,
        /// The request's.
        got: i32,
    },
    /// Epochs agree but this broker's role does not fit the request.
    #[error("this broker is not the {wanted} of the partition at leader epoch {current}")]
    WrongRole {
        /// The partition's epoch here.
        current: i32,
        /// "leader" or "follower".
        wanted: &'static str,
    },
}

impl LeaderEpochError {
    /// The wire code.
    pub fn code(&self) -> ErrorCode {
        match self {
            LeaderEpochError::Fenced { .. } => ErrorCode::FencedLeaderEpoch,
            LeaderEpochError::Unknown { .. } => ErrorCode::UnknownLeaderEpoch,
            LeaderEpochError::WrongRole { .. } => ErrorCode::NotLeaderOrFollower,
        }
    }
}

impl Leadership {
    fn compare(&self, request_epoch: i32) -> Result<(), LeaderEpochError> {
        let current = self.leader_epoch;
        if request_epoch < current {
            return Err(LeaderEpochError::Fenced { current, got: request_epoch });
        }
        if request_epoch > current {
            return Err(LeaderEpochError::Unknown { current, got: request_epoch });
        }
        Ok(())
    }

    /// Check a client request (produce, fetch, marker) carrying `request_epoch`; -1 means the
    /// caller does not know the epoch: skip the comparison but still require leadership.
    pub fn check(&self, request_epoch: i32) -> Result<(), LeaderEpochError> {
        if request_epoch >= 0 {
            self.compare(request_epoch)?;
        }
        if !self.is_leader {
            return Err(LeaderEpochError::WrongRole { current: self.leader_epoch, wanted: "leader" });
        }
        Ok(())
    }

    /// Check replication traffic from `sender`, claiming to lead at `request_epoch`. With
    /// `epoch_checks` off (only to demonstrate what they prevent) any epoch and sender is taken.
    pub fn check_replication(
        &self,
        request_epoch: i32,
        sender: i32,
        epoch_checks: bool,
    ) -> Result<(), LeaderEpochError> {
        if epoch_checks {
            self.compare(request_epoch)?;
            if sender != self.leader_id {
                return Err(LeaderEpochError::WrongRole {
                    current: self.leader_epoch,
                    wanted: "follower of that sender",
                });
            }
        }
        if self.is_leader {
            return Err(LeaderEpochError::WrongRole { current: self.leader_epoch, wanted: "follower" });
        }
        Ok(())
    }

    /// Learn a leadership from the coordinator; epochs never go backwards. Returns whether
    /// anything changed.
    pub fn learn(&mut self, is_leader: bool, leader_id: i32, leader_epoch: i32) -> bool {
        if leader_epoch < self.leader_epoch {
            return false;
        }
        let next = Leadership { is_leader, leader_id, leader_epoch };
        let changed = next != *self;
        *self = next;
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leader(epoch: i32) -> Leadership {
        Leadership { is_leader: true, leader_id: 1, leader_epoch: epoch }
    }

    #[test]
    fn stale_newer_and_equal_epochs() {
        let l = leader(3);
        assert_eq!(l.check(2), Err(LeaderEpochError::Fenced { current: 3, got: 2 }));
        assert_eq!(l.check(4), Err(LeaderEpochError::Unknown { current: 3, got: 4 }));
        assert_eq!(l.check(3), Ok(()));
        assert_eq!(l.check(-1), Ok(()));
        assert_eq!(l.check(2).unwrap_err().code(), ErrorCode::FencedLeaderEpoch);
    }

    #[test]
    fn followers_take_replication_only_from_their_epoch() {
        let f = Leadership { is_leader: false, leader_id: 2, leader_epoch: 5 };
        assert_eq!(f.check_replication(4, 2, true), Err(LeaderEpochError::Fenced { current: 5, got: 4 }));
        assert_eq!(f.check_replication(6, 2, true), Err(LeaderEpochError::Unknown { current: 5, got: 6 }));
        assert_eq!(f.check_replication(5, 2, true), Ok(()));
        assert!(matches!(f.check_replication(5, 3, true), Err(LeaderEpochError::WrongRole { .. })), "not the leader");
        assert_eq!(f.check_replication(4, 1, false), Ok(()), "the unsafe mode takes a stale leader's traffic");
        assert!(matches!(leader(5).check_replication(5, 1, true), Err(LeaderEpochError::WrongRole { .. })));
        assert!(matches!(f.check(5), Err(LeaderEpochError::WrongRole { wanted: "leader", .. })));
    }

    #[test]
    fn epochs_never_go_back() {
        let mut l = leader(3);
        assert!(!l.learn(false, 2, 2));
        assert_eq!(l, leader(3));
        assert!(l.learn(false, 2, 4));
        assert!(matches!(l.check(4), Err(LeaderEpochError::WrongRole { .. })));
        assert!(!l.learn(false, 2, 4), "same view: no change");
    }
}
