//! The coordinator replicas a broker or a client knows (`--coordinator A1,A2`,
//! `--bootstrap A1,A2`), and which one it follows.
//!
//! One replica is active; the others answer every request with NOT_COORDINATOR, naming the
//! active replica when they know it (see [`active_hint`]). A refused request was not applied,
//! so it is sent again to the replica named, or to the next one. A request whose answer was
//! lost (a timeout, a closed connection) is not: whether it was applied is unknown, and the
//! caller decides, as it does with one coordinator.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use protocol::{ErrorCode, Request, Response, Status};

use crate::{Connection, Dialer, NetError};

/// Pause between rounds over every replica while none is active (a takeover in progress).
pub const FOLLOW_PAUSE_MS: u64 = 100;
/// With several replicas, how long a dial (with its TLS and membership handshakes) may take
/// before the next replica is tried: a frozen process's kernel still accepts connections.
pub const DIAL_TIMEOUT_MS: u64 = 2_000;
/// With several replicas, how often the others are asked who is active while an answer is
/// awaited: a replica frozen mid-request (and deposed meanwhile) never answers.
pub const PROBE_MS: u64 = 1_000;

/// What a standby's NOT_COORDINATOR message says before the active replica's address.
pub const ACTIVE_HINT: &str = "the active replica is at ";

/// The active replica's address named in a NOT_COORDINATOR message, if any.
pub fn active_hint(message: &str) -> Option<&str> {
    let at = message.find(ACTIVE_HINT)? + ACTIVE_HINT.len();
    let addr = message[at..].split(|c: char| c.is_whitespace() || c == ',' || c == ';').next()?;
    (!addr.is_empty()).then_some(addr)
}

/// A list of coordinator replicas and the connection to the one followed now.
#[derive(Debug)]
pub struct Coordinators {
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    addrs: Vec<String>,
    /// Index in `addrs` of the replica followed now.
    current: usize,
    conn: Option<Connection>,
}

impl Coordinators {
    /// Replicas from a comma-separated list (one address works as before).
    pub fn new(list: &str) -> Coordinators {
        let mut addrs: Vec<String> =
            list.split(',').map(str::trim).filter(|a| !a.is_empty()).map(str::to_string).collect();
        if addrs.is_empty() {
            addrs.push(list.to_string());
        }
        Coordinators { state: Mutex::new(State { addrs, current: 0, conn: None }) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every replica's address.
    pub fn addrs(&self) -> Vec<String> {
        self.lock().addrs.clone()
    }

    /// The address of the replica followed now.
    pub fn current(&self) -> String {
        let s = self.lock();
        s.addrs[s.current].clone()
    }

    /// The open connection to the followed replica, or a new one (see [`Coordinators::dial`])
    /// dialled by `deadline`, kept for the next call.
    async fn connection_within(&self, dialer: &Dialer, deadline: Instant) -> Result<Connection, NetError> {
        if let Some(c) = self.lock().conn.as_ref().filter(|c| !c.is_closed()) {
            return Ok(c.clone());
        }
        let c = self.dial_within(dialer, Some(deadline)).await?;
        let mut s = self.lock();
        if let Some(open) = s.conn.as_ref().filter(|c| !c.is_closed()) {
            return Ok(open.clone()); // another caller connected meanwhile
        }
        s.conn = Some(c.clone());
        Ok(c)
    }

    /// A new connection by `deadline`: to the followed replica first, then each other in turn
    /// (the first that accepts is followed from then on).
    pub async fn dial(&self, dialer: &Dialer, deadline: Instant) -> Result<Connection, NetError> {
        self.dial_within(dialer, Some(deadline)).await
    }

    /// [`Coordinators::dial`], giving up at `deadline`.
    async fn dial_within(&self, dialer: &Dialer, deadline: Option<Instant>) -> Result<Connection, NetError> {
        let (addrs, start) = {
            let s = self.lock();
            (s.addrs.clone(), s.current)
        };
        let mut last = None;
        for i in 0..addrs.len() {
            let at = (start + i) % addrs.len();
            let mut limit = (addrs.len() > 1).then_some(Duration::from_millis(DIAL_TIMEOUT_MS));
            if let Some(d) = deadline {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() && last.is_some() {
                    break;
                }
                limit = Some(limit.map_or(left, |l| l.min(left)).max(Duration::from_millis(1)));
            }
            match dial_bounded(dialer, &addrs[at], limit).await {
                Ok(c) => {
                    self.lock().current = at;
                    return Ok(c);
                }
                // A refused login or membership proof: another replica's answer (a standby's
                // NOT_COORDINATOR) must not hide it.
                Err(e) if !e.is_retriable() => return Err(e),
                Err(e) => last = Some(e),
            }
        }
        Err(last.expect("at least one address"))
    }

    /// Whether another replica than `waiting_on` is active now: asked of each other replica (a
    /// standby names the active one; an active one answers the probe). A replica named is
    /// believed only once it answers a probe itself, and only if it is not `waiting_on` under
    /// another name (both resolve to a common address).
    async fn active_elsewhere(&self, dialer: &Dialer, waiting_on: &str) -> Option<String> {
        let others: Vec<String> = self.addrs().into_iter().filter(|a| a != waiting_on).collect();
        for addr in others {
            let named = match probe(dialer, &addr).await {
                Probe::Serves => addr.clone(),
                Probe::Names(h) if h != waiting_on => h,
                Probe::Names(_) => return None, // the one waited on is still the active one
                Probe::Unknown => continue,
            };
            if same_replica(&named, waiting_on).await {
                return None;
            }
            if named == addr || matches!(probe(dialer, &named).await, Probe::Serves) {
                return Some(named);
            }
        }
        None
    }

    /// `conn` did not serve (NOT_COORDINATOR, or it broke): drop it and follow the replica
    /// `hint` names, else the next one.
    pub fn not_served(&self, conn: &Connection, hint: Option<&str>) {
        {
            let mut s = self.lock();
            if s.conn.as_ref().is_some_and(|c| c.same_as(conn)) {
                s.conn = None;
            }
        }
        self.follow(conn.addr(), hint);
    }

    /// The replica at `failed` did not serve: if it is the one followed, follow the one
    /// `hint` names (added if it is not in the list), else the next one.
    pub fn follow(&self, failed: &str, hint: Option<&str>) {
        let mut s = self.lock();
        if s.addrs[s.current] != failed {
            return; // already moved on
        }
        s.current = match hint.filter(|h| *h != failed) {
            Some(h) => match s.addrs.iter().position(|a| a == h) {
                Some(i) => i,
                None => {
                    s.addrs.push(h.to_string());
                    s.addrs.len() - 1
                }
            },
            None => (s.current + 1) % s.addrs.len(),
        };
    }

    /// Await `answer`, a call on `conn`; with several replicas, give up on it once another
    /// replica is active (asked every [`PROBE_MS`]): a replica frozen mid-request (and deposed
    /// meanwhile) never answers. The request may or may not have been applied then, as with
    /// any lost answer.
    pub async fn answer_unless_replaced(
        &self,
        dialer: &Dialer,
        conn: &Connection,
        answer: impl std::future::Future<Output = Result<Response, NetError>>,
    ) -> Result<Response, NetError> {
        if self.lock().addrs.len() < 2 {
            return answer.await;
        }
        tokio::pin!(answer);
        loop {
            // The probe runs beside the wait: an answer that comes meanwhile is taken at once.
            let replaced = async {
                tokio::time::sleep(Duration::from_millis(PROBE_MS)).await;
                self.active_elsewhere(dialer, conn.addr()).await
            };
            tokio::select! {
                a = &mut answer => return a,
                found = replaced => {
                    if let Some(active) = found {
                        self.not_served(conn, Some(&active));
                        return Err(NetError::Closed {
                            addr: conn.addr().to_string(),
                            detail: format!(
                                "no answer, and {active} has taken over as the active coordinator replica: the request may or may not have been applied"
                            ),
                        });
                    }
                }
            }
        }
    }

    /// Call the active replica: a NOT_COORDINATOR answer (or a replica that cannot be reached)
    /// moves on to the replica named, or the next, until one serves or `timeout` passes (then
    /// the last refusal or error is returned). An answer that was lost is returned as is.
    pub async fn call(&self, dialer: &Dialer, req: Request, timeout: Duration) -> Result<Response, NetError> {
        let deadline = Instant::now() + timeout;
        let mut refusals = 0usize;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let conn = match self.connection_within(dialer, deadline).await {
                Ok(c) => c,
                // A refused login or membership proof: dialling again changes nothing.
                Err(e) if left.is_zero() || !e.is_retriable() => return Err(e),
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(FOLLOW_PAUSE_MS).min(left)).await;
                    continue;
                }
            };
            let answer = conn.call_timeout(req.clone(), left.max(Duration::from_millis(1)));
            let answer = self.answer_unless_replaced(dialer, &conn, answer).await;
            match answer {
                Err(NetError::Refused { addr, status }) if status.code == ErrorCode::NotCoordinator => {
                    let hint = active_hint(&status.message).map(str::to_string);
                    self.not_served(&conn, hint.as_deref());
                    if Instant::now() >= deadline {
                        return Err(NetError::Refused { addr, status });
                    }
                    refusals += 1;
                    // A hint is followed at once; a full round of refusals (a takeover in
                    // progress) waits a little before the next.
                    if hint.is_none() || refusals.is_multiple_of(self.lock().addrs.len().max(1) + 1) {
                        let left = deadline.saturating_duration_since(Instant::now());
                        tokio::time::sleep(Duration::from_millis(FOLLOW_PAUSE_MS).min(left)).await;
                    }
                }
                Err(e) => {
                    // Closed, or no answer in time (a replica frozen with its socket open):
                    // the next call dials again, the next replica if there is one.
                    self.not_served(&conn, None);
                    return Err(e);
                }
                Ok(r) => return Ok(r),
            }
        }
    }
}

/// Dial `addr`, within `limit` if given.
async fn dial_bounded(dialer: &Dialer, addr: &str, limit: Option<Duration>) -> Result<Connection, NetError> {
    let Some(limit) = limit else { return dialer.dial(addr).await };
    match tokio::time::timeout(limit, dialer.dial(addr)).await {
        Ok(r) => r,
        Err(_) => Err(NetError::Timeout { addr: addr.to_string(), timeout_ms: limit.as_millis() as u64 }),
    }
}

/// What a replica says about who is active.
enum Probe {
    /// It answered a request: it is active.
    Serves,
    /// A standby, naming the active replica.
    Names(String),
    /// Unreachable, or a standby that knows no active replica.
    Unknown,
}

/// Ask the replica at `addr` a cheap request (Metadata of no topic: answered from memory).
async fn probe(dialer: &Dialer, addr: &str) -> Probe {
    let named = |status: &Status| active_hint(&status.message).map_or(Probe::Unknown, |h| Probe::Names(h.to_string()));
    let conn = match dial_bounded(dialer, addr, Some(Duration::from_millis(DIAL_TIMEOUT_MS))).await {
        Ok(conn) => conn,
        // A standby refuses logins, naming the active replica.
        Err(NetError::Refused { status, .. }) if status.code == ErrorCode::NotCoordinator => return named(&status),
        Err(_) => return Probe::Unknown,
    };
    let req = Request::Metadata(protocol::MetadataRequest { topics: Vec::new(), allow_auto_create: false });
    match conn.call_timeout(req, Duration::from_millis(DIAL_TIMEOUT_MS)).await {
        Err(NetError::Refused { status, .. }) if status.code == ErrorCode::NotCoordinator => named(&status),
        Ok(_) => Probe::Serves,
        // A logged-in client's request is authorized only where it is served: the ACLs' refusal
        // comes from the active replica (a standby's answers NOT_COORDINATOR).
        Err(NetError::Refused { status, .. })
            if dialer.login.is_some() && status.code == ErrorCode::ClusterAuthorizationFailed =>
        {
            Probe::Serves
        }
        Err(_) => Probe::Unknown,
    }
}

/// Whether two addresses name one replica: equal, or resolving to a common socket address
/// (`localhost:9092` and `127.0.0.1:9092`).
async fn same_replica(a: &str, b: &str) -> bool {
    if a == b {
        return true;
    }
    let resolve = |addr: String| async move {
        tokio::net::lookup_host(addr).await.map(|it| it.collect::<Vec<_>>()).unwrap_or_default()
    };
    let (x, y) = (resolve(a.to_string()).await, resolve(b.to_string()).await);
    x.iter().any(|s| y.contains(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hint_is_the_address_after_the_phrase() {
        let m = format!("this coordinator replica is a standby; {ACTIVE_HINT}127.0.0.1:9092 (coordinator epoch 3)");
        assert_eq!(active_hint(&m), Some("127.0.0.1:9092"));
        assert_eq!(active_hint("this replica is a standby; no active replica is known"), None);
    }

    #[test]
    fn a_refusal_follows_the_hint_or_the_next_replica() {
        let c = Coordinators::new("a:1,b:2,c:3");
        c.follow("a:1", Some("c:3"));
        assert_eq!(c.current(), "c:3");
        c.follow("b:2", None); // not the one followed: nothing changes
        assert_eq!(c.current(), "c:3");
        c.follow("c:3", None);
        assert_eq!(c.current(), "a:1", "wraps around");
        c.follow("a:1", Some("d:4"));
        assert_eq!((c.current(), c.addrs().len()), ("d:4".to_string(), 4), "a replica not listed is added");
    }

    #[test]
    fn a_list_of_one_address_is_that_address() {
        assert_eq!(Coordinators::new("127.0.0.1:1").addrs(), ["127.0.0.1:1"]);
        assert_eq!(Coordinators::new(" a:1, b:2 ,").addrs(), ["a:1", "b:2"]);
    }

    /// A replica whose host takes no connection (its accept queue full, as a frozen process's
    /// fills up; or packets dropped) makes a dial give up at its deadline, with one replica too.
    #[tokio::test]
    async fn a_dial_gives_up_at_its_deadline() {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let listener = socket.listen(0).unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        // Never accepted: once the queue is full, the kernel drops further handshakes (a
        // loopback connect that can complete takes far less than the second allowed here).
        let mut held = Vec::new();
        let full = async {
            loop {
                match tokio::time::timeout(Duration::from_secs(1), tokio::net::TcpStream::connect(&addr)).await {
                    Ok(Ok(s)) => held.push(s),
                    _ => return,
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(30), full).await.expect("the accept queue fills up");
        let c = Coordinators::new(&addr);
        let started = Instant::now();
        let dialer = Dialer::plain();
        let dial = c.dial(&dialer, started + Duration::from_millis(300));
        let err =
            tokio::time::timeout(Duration::from_secs(10), dial).await.expect("gave up by its deadline").unwrap_err();
        assert!(matches!(err, NetError::Timeout { .. }), "{err}");
    }
}
