//! Kafka's SCRAM credential apis (KIP-554): DescribeUserScramCredentials (answered from this
//! broker's copy of the credentials, which a change relayed through this broker updates at once
//! and a change through another reaches within a heartbeat) and AlterUserScramCredentials
//! (relayed to the coordinator, which keeps and journals them, as one
//! [`protocol::ScramCredentialsRequest`]). The client salts the password: it never reaches the
//! broker. Under the authorizer they need DESCRIBE and ALTER on the cluster; without it,
//! AlterUserScramCredentials is, like CreateTopics, cluster-internal on a cluster with a secret.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse, DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse, ResponseKind,
};
use kafka_protocol::protocol::StrBytes;
use protocol::acl::{Operation, REQUEST_ITEMS_MAX};
use protocol::kafka::KafkaAnswer;
use protocol::sasl::{ScramCredential, ScramMechanism};
use protocol::{ErrorCode, Request, Response, ScramCredentialsRequest, Status, UserCredential};

use super::KafkaConn;

fn s(v: impl Into<String>) -> StrBytes {
    StrBytes::from_string(v.into())
}

impl KafkaConn {
    pub(super) fn describe_user_scram_credentials(&self, r: DescribeUserScramCredentialsRequest) -> KafkaAnswer {
        let reply = |resp| KafkaAnswer::Reply(ResponseKind::DescribeUserScramCredentials(resp));
        if let Some(status) = self.caller().cluster_refusal(Operation::Describe) {
            return reply(
                DescribeUserScramCredentialsResponse::default()
                    .with_error_code(status.code.code())
                    .with_error_message(Some(s(status.message))),
            );
        }
        // Mechanism and iterations per user: never a salt or a key.
        let mut by_user: BTreeMap<String, Vec<CredentialInfo>> = BTreeMap::new();
        for u in self.shared.credentials.all().users.iter() {
            by_user.entry(u.user.clone()).or_default().push(
                CredentialInfo::default()
                    .with_mechanism(u.credential.mechanism.kafka_type())
                    .with_iterations(u.credential.iterations as i32),
            );
        }
        let asked: Vec<String> = match &r.users {
            Some(users) if !users.is_empty() => users.iter().map(|u| u.name.to_string()).collect(),
            _ => by_user.keys().cloned().collect(),
        };
        let mut times: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
        for n in &asked {
            *times.entry(n.as_str()).or_default() += 1;
        }
        let results = asked
            .iter()
            .map(|name| {
                let out = DescribeUserScramCredentialsResult::default().with_user(s(name.clone()));
                if times[name.as_str()] > 1 {
                    return out.with_error_code(ErrorCode::DuplicateResource.code()).with_error_message(Some(s(
                        "Cannot describe SCRAM credentials for the same user twice in a single request",
                    )));
                }
                match by_user.get(name) {
                    Some(infos) => out.with_credential_infos(infos.clone()),
                    None => out
                        .with_error_code(ErrorCode::ResourceNotFound.code())
                        .with_error_message(Some(s("Attempt to describe a user credential that does not exist"))),
                }
            })
            .collect();
        reply(DescribeUserScramCredentialsResponse::default().with_results(results))
    }

    pub(super) async fn alter_user_scram_credentials(
        self: &Arc<Self>,
        r: AlterUserScramCredentialsRequest,
    ) -> KafkaAnswer {
        let reply = |results| {
            KafkaAnswer::Reply(ResponseKind::AlterUserScramCredentials(
                AlterUserScramCredentialsResponse::default().with_results(results),
            ))
        };
        let result = |user: &str, status: &Status| {
            let out = AlterUserScramCredentialsResult::default().with_user(s(user)).with_error_code(status.code.code());
            if status.is_ok() {
                out
            } else {
                out.with_error_message(Some(s(status.message.clone())))
            }
        };
        // Authorization first: nothing of the request is looked at for a caller who may not.
        let refusal = self.caller().cluster_refusal(Operation::Alter);
        let items = r.upsertions.len() + r.deletions.len();
        let too_many = (items > REQUEST_ITEMS_MAX).then(|| {
            Status::new(
                ErrorCode::InvalidRequest,
                format!("{items} credential changes in one request; at most {REQUEST_ITEMS_MAX}: send several"),
            )
        });
        let mut seen = std::collections::HashSet::new();
        let names: Vec<String> = r
            .upsertions
            .iter()
            .map(|u| &u.name)
            .chain(r.deletions.iter().map(|d| &d.name))
            .filter(|n| seen.insert(n.as_str()))
            .map(|n| n.to_string())
            .collect();
        if let Some(status) = refusal.or(too_many) {
            return reply(names.iter().map(|n| result(n, &status)).collect());
        }
        // A mechanism Kafka does not know is refused here, for that user.
        let unsupported =
            |code: i8| Status::new(ErrorCode::UnsupportedSaslMechanism, format!("Unknown SCRAM mechanism {code}"));
        let mut refused: BTreeMap<String, Status> = BTreeMap::new();
        let mut req = ScramCredentialsRequest::default();
        for u in &r.upsertions {
            match ScramMechanism::from_kafka_type(u.mechanism) {
                Some(m) => req.upserts.push(UserCredential {
                    user: u.name.to_string(),
                    credential: ScramCredential::from_salted_password(
                        m,
                        &u.salted_password,
                        u.salt.to_vec(),
                        u32::try_from(u.iterations).unwrap_or(0),
                    ),
                }),
                None => {
                    refused.insert(u.name.to_string(), unsupported(u.mechanism));
                }
            }
        }
        for d in &r.deletions {
            match ScramMechanism::from_kafka_type(d.mechanism) {
                Some(m) => req.deletions.push((d.name.to_string(), m)),
                None => {
                    refused.insert(d.name.to_string(), unsupported(d.mechanism));
                }
            }
        }
        req.upserts.retain(|u| !refused.contains_key(&u.user));
        req.deletions.retain(|(u, _)| !refused.contains_key(u));
        let answered: BTreeMap<String, Status> = if req.upserts.is_empty() && req.deletions.is_empty() {
            BTreeMap::new()
        } else {
            match self.relay(Request::ScramCredentials(req)).await {
                Response::ScramCredentials(a) if a.status.is_ok() => {
                    self.shared.credentials.replace_if_newer(a.credentials);
                    a.results.into_iter().collect()
                }
                other => {
                    let status = self.admin_refusal(other.status().clone(), "changing SCRAM credentials");
                    names.iter().map(|n| (n.clone(), status.clone())).collect()
                }
            }
        };
        let missing = Status::new(ErrorCode::UnknownServerError, "no answer for this user");
        reply(names.iter().map(|n| result(n, refused.get(n).or_else(|| answered.get(n)).unwrap_or(&missing))).collect())
    }
}
