//! Leader-epoch checks: plain rules, no I/O.

use protocol::ErrorCode;

/// What this broker believes about one partition's leadership.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Leadership {
    /// Whether this broker leads the partition.
    pub is_leader: bool,
    /// The newest leader epoch this broker has learnt for the partition.
    pub leader_epoch: i32,
}

/// A request's leader epoch does not match.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LeaderEpochError {
    /// The caller's epoch is older: it is stale and must refresh its metadata.
    #[error("leader epoch {got} is older than the partition's {current}: refresh metadata")]
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
    /// Epochs agree but this broker does not lead the partition.
    #[error("this broker does not lead the partition at epoch {current}")]
    NotLeader {
        /// The partition's epoch here.
        current: i32,
    },
}

impl LeaderEpochError {
    /// The wire code.
    pub fn code(&self) -> ErrorCode {
        match self {
            LeaderEpochError::Fenced { .. } => ErrorCode::FencedLeaderEpoch,
            LeaderEpochError::Unknown { .. } => ErrorCode::UnknownLeaderEpoch,
            LeaderEpochError::NotLeader { .. } => ErrorCode::NotLeaderOrFollower,
        }
    }
}

impl Leadership {
    /// Check a request carrying `request_epoch` (-1: the caller does not know, skip the epoch
    /// comparison but still require leadership).
    pub fn check(&self, request_epoch: i32) -> Result<(), LeaderEpochError> {
        let current = self.leader_epoch;
        if request_epoch >= 0 && request_epoch < current {
            return Err(LeaderEpochError::Fenced { current, got: request_epoch });
        }
        if request_epoch > current {
            return Err(LeaderEpochError::Unknown { current, got: request_epoch });
        }
        if !self.is_leader {
            return Err(LeaderEpochError::NotLeader { current });
        }
        Ok(())
    }

    /// Learn a leadership from the coordinator; epochs never go backwards.
    pub fn learn(&mut self, is_leader: bool, leader_epoch: i32) {
        if leader_epoch > self.leader_epoch {
            self.leader_epoch = leader_epoch;
            self.is_leader = is_leader;
        } else if leader_epoch == self.leader_epoch {
            self.is_leader = is_leader;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_newer_and_equal_epochs() {
        let l = Leadership { is_leader: true, leader_epoch: 3 };
        assert_eq!(l.check(2), Err(LeaderEpochError::Fenced { current: 3, got: 2 }));
        assert_eq!(l.check(4), Err(LeaderEpochError::Unknown { current: 3, got: 4 }));
        assert_eq!(l.check(3), Ok(()));
        assert_eq!(l.check(-1), Ok(()));
        assert_eq!(l.check(2).unwrap_err().code(), ErrorCode::FencedLeaderEpoch);
    }

    #[test]
    fn not_leader_and_epochs_never_go_back() {
        let mut l = Leadership { is_leader: true, leader_epoch: 3 };
        l.learn(false, 2);
        assert_eq!(l, Leadership { is_leader: true, leader_epoch: 3 });
        l.learn(false, 4);
        assert_eq!(l.check(4), Err(LeaderEpochError::NotLeader { current: 4 }));
    }
}
