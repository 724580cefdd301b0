//! The SASL exchange a Kafka listener runs before a login, and the ACL bindings and filters the
//! coordinator and brokers decode, on arbitrary bytes: never a panic. The input is split at its
//! first 0xff byte: the first part is the client's first message (PLAIN, or SCRAM's
//! client-first), the rest its final message; a SCRAM exchange started from the first part is
//! finished with the rest, against a known credential, and the rest also goes to the client
//! side (as a server's first and final messages) and to the ACL decoders. The first part, as
//! text, is also read as `ssl.principal.mapping.rules`, which map the rest as a subject.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use protocol::acl::{AclBinding, AclFilter, Authorization};
use protocol::sasl::{ClientFirst, PlainLogin, ScramClient, ScramCredential, ScramExchange, ScramMechanism};
use protocol::wire::Reader;

fuzz_target!(|data: &[u8]| {
    let (first, rest) = match data.iter().position(|b| *b == 0xff) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let _ = PlainLogin::parse(first);
    if let Ok(client_first) = ClientFirst::parse(first) {
        let credential = ScramCredential::from_salted_password(ScramMechanism::Sha256, b"salted", b"salt".to_vec(), 4096);
        let (exchange, _server_first) = ScramExchange::start(client_first, credential, "servernonce");
        let _ = exchange.finish(rest);
    }
    let (mut client, _) = ScramClient::new(ScramMechanism::Sha512, "alice", b"pw", "clientnonce");
    if client.server_first(first).is_ok() {
        let _ = client.server_final(rest);
    }
    if let Ok(rules) = std::str::from_utf8(first) {
        if let Ok(mapper) = protocol::principal::PrincipalMapper::parse(rules) {
            let _ = mapper.name(&String::from_utf8_lossy(rest));
        }
    }
    for decode in [
        |r: &mut Reader| AclBinding::decode(r).map(|_| ()),
        |r: &mut Reader| AclFilter::decode(r).map(|_| ()),
        |r: &mut Reader| Authorization::decode(r).map(|_| ()),
    ] {
        let mut r = Reader::new(Bytes::copy_from_slice(rest));
        let _ = decode(&mut r);
    }
});
