//! The SCRAM credentials the coordinator keeps (KIP-554): plain state changed only by journal
//! entries, and the decisions of a [`ScramCredentialsRequest`] as the entries that carry them
//! out, with Kafka's checks and errors.
//!
//! Each change is one [`Entry::ScramCredentials`]; a snapshot is one such entry holding every
//! credential. `--scram-users-file` is applied at each start ([`CredentialStore::from_users`]):
//! a listed user whose credential does not match the file's password gets a new one, so the
//! file wins for the names it lists and leaves every other user alone. Brokers receive the
//! credentials in heartbeat answers under a version that is new at every start and one higher
//! at every change, as the ACLs are.

use std::collections::{BTreeMap, BTreeSet};

use protocol::sasl::{ScramCredential, ScramMechanism, ITERATIONS_MAX, ITERATIONS_MIN};
use protocol::{Credentials, ErrorCode, ScramCredentialsRequest, Status, UserCredential};

use crate::entry::Entry;

/// Most users the coordinator keeps credentials for: every credential travels to every broker
/// in heartbeat answers, so the set is bounded.
pub const SCRAM_USERS_MAX: usize = 10_000;
/// Longest user name and salt, in bytes (what travels is bounded per credential too).
pub const SCRAM_FIELD_BYTES_MAX: usize = 256;

/// Every user's credentials, as the journal built them.
#[derive(Debug, Default)]
pub struct CredentialStore {
    /// By (user, mechanism's Kafka type).
    users: BTreeMap<(String, i8), ScramCredential>,
    /// Changes applied since this process started (part of the version brokers see).
    changes: i64,
}

impl CredentialStore {
    /// Apply a journal entry (only [`Entry::ScramCredentials`] changes anything).
    pub fn apply(&mut self, entry: &Entry) {
        if let Entry::ScramCredentials { upserts, deletions } = entry {
            for (user, mechanism) in deletions {
                self.users.remove(&(user.clone(), mechanism.kafka_type()));
            }
            for u in upserts {
                self.users.insert((u.user.clone(), u.credential.mechanism.kafka_type()), u.credential.clone());
            }
            self.changes += 1;
        }
    }

    /// The entries that rebuild this state (none when there are no credentials).
    pub fn snapshot(&self) -> Vec<Entry> {
        if self.users.is_empty() {
            return Vec::new();
        }
        vec![Entry::ScramCredentials { upserts: self.all(), deletions: Vec::new() }]
    }

    fn all(&self) -> Vec<UserCredential> {
        self.users.iter().map(|((user, _), c)| UserCredential { user: user.clone(), credential: c.clone() }).collect()
    }

    /// What brokers are handed: every credential, under `base` (new at each start) plus the
    /// changes applied since.
    pub fn credentials(&self, base: i64) -> Credentials {
        Credentials { version: base.wrapping_add(self.changes), users: self.all() }
    }

    /// `user`'s credential for `mechanism`, if it has one.
    pub fn lookup(&self, user: &str, mechanism: ScramMechanism) -> Option<protocol::sasl::ScramCredential> {
        self.users.get(&(user.to_string(), mechanism.kafka_type())).cloned()
    }

    /// How many users hold a credential.
    pub fn user_count(&self) -> usize {
        self.users.keys().map(|(u, _)| u).collect::<BTreeSet<_>>().len()
    }

    /// The entry making `--scram-users-file`'s users' credentials (SCRAM-SHA-256 and
    /// SCRAM-SHA-512, `ITERATIONS_MIN` iterations, salts from `salt`) match their passwords, if
    /// any does not. PBKDF2 per user and mechanism: run it before serving.
    pub fn from_users(&self, users: &[(String, String)], mut salt: impl FnMut() -> Vec<u8>) -> Option<Entry> {
        let mut upserts = Vec::new();
        for (user, password) in users {
            for mechanism in ScramMechanism::ALL {
                let held = self.users.get(&(user.clone(), mechanism.kafka_type()));
                if held.is_some_and(|c| c.matches_password(password.as_bytes())) {
                    continue;
                }
                let credential = ScramCredential::from_password(mechanism, password.as_bytes(), salt(), ITERATIONS_MIN);
                upserts.push(UserCredential { user: user.clone(), credential });
            }
        }
        (!upserts.is_empty()).then_some(Entry::ScramCredentials { upserts, deletions: Vec::new() })
    }

    /// Decide `req` as Kafka's controller does: one result per user named (in first-seen
    /// order), and the entry that carries out the changes of the users that passed (none when
    /// nothing changes); a user's changes are made all or none. A (user, mechanism) named twice
    /// (in upsertions and deletions together, or twice in either) is DUPLICATE_RESOURCE; an empty
    /// name or iterations outside 4096..=16384 UNACCEPTABLE_CREDENTIAL; a deletion of a credential
    /// that does not exist RESOURCE_NOT_FOUND; a new user past [`SCRAM_USERS_MAX`]
    /// POLICY_VIOLATION.
    pub fn decide(&self, req: &ScramCredentialsRequest) -> (Option<Entry>, Vec<(String, Status)>) {
        let ops = req
            .upserts
            .iter()
            .map(|u| (u.user.as_str(), u.credential.mechanism, Some(u)))
            .chain(req.deletions.iter().map(|(u, m)| (u.as_str(), *m, None)));
        // Per user, its operations: (mechanism, the credential to upsert or none to delete).
        type Ops<'a> = Vec<(ScramMechanism, Option<&'a UserCredential>)>;
        let mut by_user: Vec<(String, Ops)> = Vec::new();
        let mut index: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
        let too_many = req.upserts.len() + req.deletions.len() > protocol::acl::REQUEST_ITEMS_MAX;
        for (user, mechanism, upsert) in ops {
            match index.get(user) {
                Some(&i) => by_user[i].1.push((mechanism, upsert)),
                None => {
                    index.insert(user, by_user.len());
                    by_user.push((user.to_string(), vec![(mechanism, upsert)]));
                }
            }
        }
        let mut users = self.user_count();
        let mut upserts = Vec::new();
        let mut deletions = Vec::new();
        let results = by_user
            .into_iter()
            .map(|(name, ops)| {
                let refusal = |code, message: &str| Some(Status::new(code, message.to_string()));
                let duplicate = ops.iter().enumerate().any(|(i, (m, _))| ops[..i].iter().any(|(n, _)| n == m));
                let known = self.users.keys().any(|(user, _)| *user == name);
                let upserting = ops.iter().any(|(_, u)| u.is_some());
                let refused = if too_many {
                    Some(Status::new(
                        ErrorCode::InvalidRequest,
                        format!("more than {} credential changes in one request: send several", protocol::acl::REQUEST_ITEMS_MAX),
                    ))
                } else if duplicate {
                    refusal(ErrorCode::DuplicateResource, "A user credential cannot be altered twice in the same request")
                } else if name.is_empty() {
                    refusal(ErrorCode::UnacceptableCredential, "Username must not be empty")
                } else if name.len() > SCRAM_FIELD_BYTES_MAX
                    || ops.iter().any(|(_, u)| u.is_some_and(|u| u.credential.salt.len() > SCRAM_FIELD_BYTES_MAX))
                {
                    Some(Status::new(
                        ErrorCode::UnacceptableCredential,
                        format!("a user name or salt longer than {SCRAM_FIELD_BYTES_MAX} bytes"),
                    ))
                } else if ops.iter().any(|(_, u)| u.is_some_and(|u| u.credential.iterations < ITERATIONS_MIN)) {
                    Some(Status::new(ErrorCode::UnacceptableCredential, format!("Too few iterations: at least {ITERATIONS_MIN}")))
                } else if ops.iter().any(|(_, u)| u.is_some_and(|u| u.credential.iterations > ITERATIONS_MAX)) {
                    Some(Status::new(ErrorCode::UnacceptableCredential, format!("Too many iterations: at most {ITERATIONS_MAX}")))
                } else if ops.iter().any(|(m, u)| u.is_none() && !self.users.contains_key(&(name.clone(), m.kafka_type()))) {
                    refusal(ErrorCode::ResourceNotFound, "Attempt to delete a user credential that does not exist")
                } else if upserting && !known && users >= SCRAM_USERS_MAX {
                    Some(Status::new(
                        ErrorCode::PolicyViolation,
                        format!("the cluster holds credentials for scram_users_max {SCRAM_USERS_MAX} users; delete some first"),
                    ))
                } else {
                    None
                };
                if refused.is_none() {
                    users += usize::from(upserting && !known);
                    for (m, u) in ops {
                        match u {
                            Some(u) => upserts.push(u.clone()),
                            None => deletions.push((name.clone(), m)),
                        }
                    }
                }
                (name, refused.unwrap_or_else(Status::ok))
            })
            .collect();
        let entry =
            (!upserts.is_empty() || !deletions.is_empty()).then_some(Entry::ScramCredentials { upserts, deletions });
        (entry, results)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cred(m: ScramMechanism, password: &str, iterations: u32) -> ScramCredential {
        ScramCredential::from_password(m, password.as_bytes(), b"salt".to_vec(), iterations)
    }

    #[test]
    fn kafkas_checks_and_replay() {
        let mut store = CredentialStore::default();
        let alice = UserCredential { user: "alice".into(), credential: cred(ScramMechanism::Sha256, "pw", 4096) };
        let req = ScramCredentialsRequest {
            upserts: vec![
                alice.clone(),
                UserCredential { user: "few".into(), credential: cred(ScramMechanism::Sha512, "pw", 4095) },
                UserCredential { user: "twice".into(), credential: cred(ScramMechanism::Sha512, "pw", 4096) },
                UserCredential { user: String::new(), credential: cred(ScramMechanism::Sha512, "pw", 4096) },
            ],
            deletions: vec![("twice".into(), ScramMechanism::Sha512), ("ghost".into(), ScramMechanism::Sha256)],
        };
        let (entry, results) = store.decide(&req);
        let codes: Vec<(&str, ErrorCode)> = results.iter().map(|(u, s)| (u.as_str(), s.code)).collect();
        assert_eq!(
            codes,
            [
                ("alice", ErrorCode::None),
                ("few", ErrorCode::UnacceptableCredential),
                ("twice", ErrorCode::DuplicateResource),
                ("", ErrorCode::UnacceptableCredential),
                ("ghost", ErrorCode::ResourceNotFound),
            ]
        );
        let entry = entry.unwrap();
        assert_eq!(entry, Entry::ScramCredentials { upserts: vec![alice.clone()], deletions: vec![] });
        store.apply(&entry);
        let v1 = store.credentials(10).version;
        assert_eq!(store.credentials(10).users, vec![alice.clone()]);

        // Deleting it: an entry, a new version; a snapshot rebuilds what is left.
        store.apply(&Entry::ScramCredentials {
            upserts: vec![UserCredential { user: "bob".into(), credential: cred(ScramMechanism::Sha512, "b", 4096) }],
            deletions: vec![],
        });
        let (entry, results) = store.decide(&ScramCredentialsRequest {
            upserts: vec![],
            deletions: vec![("alice".into(), ScramMechanism::Sha256)],
        });
        assert!(results[0].1.is_ok());
        store.apply(&entry.unwrap());
        assert!(store.credentials(10).version > v1);
        let mut rebuilt = CredentialStore::default();
        for e in store.snapshot() {
            rebuilt.apply(&Entry::decode(e.encode()).unwrap());
        }
        assert_eq!(rebuilt.credentials(0).users, store.credentials(0).users);
        assert_eq!(rebuilt.user_count(), 1);
    }

    #[test]
    fn a_users_mechanisms_change_together_or_not_at_all() {
        let store = CredentialStore::default();
        let both = ScramCredentialsRequest {
            upserts: vec![
                UserCredential { user: "carol".into(), credential: cred(ScramMechanism::Sha256, "pw", 4096) },
                UserCredential { user: "carol".into(), credential: cred(ScramMechanism::Sha512, "pw", 4096) },
            ],
            deletions: vec![],
        };
        let (entry, results) = store.decide(&both);
        assert_eq!(results, vec![("carol".to_string(), Status::ok())]);
        assert!(matches!(entry, Some(Entry::ScramCredentials { ref upserts, .. }) if upserts.len() == 2));
        // One of them refused: neither is made.
        let mut one_bad = both.clone();
        one_bad.upserts[1].credential.iterations = 20_000;
        let (entry, results) = store.decide(&one_bad);
        assert_eq!(results[0].1.code, ErrorCode::UnacceptableCredential);
        assert!(entry.is_none());
    }

    #[test]
    fn the_users_file_wins_for_its_names_and_only_when_it_differs() {
        let mut store = CredentialStore::default();
        let users = vec![("alice".to_string(), "pw".to_string())];
        let mut n = 0u8;
        let mut salt = || {
            n += 1;
            vec![n; 16]
        };
        let entry = store.from_users(&users, &mut salt).unwrap();
        store.apply(&entry);
        assert_eq!(store.credentials(0).users.len(), 2, "both mechanisms");
        assert!(store.from_users(&users, &mut salt).is_none(), "the same passwords: nothing to write");
        let changed = vec![("alice".to_string(), "new".to_string())];
        let Some(Entry::ScramCredentials { upserts, .. }) = store.from_users(&changed, &mut salt) else { panic!() };
        assert_eq!(upserts.len(), 2);
        assert!(upserts.iter().all(|u| u.credential.matches_password(b"new")));
    }
}
