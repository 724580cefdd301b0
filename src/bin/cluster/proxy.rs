//! The proxies `cluster` puts on the cluster's own links, so that `cluster isolate broker N`
//! can cut one broker off without the broker or the coordinator knowing about faults.
//!
//! Each broker has two: one in front of its internal listener (the address it advertises, so
//! the coordinator and the other brokers reach it through the proxy) and one in front of the
//! coordinator that only this broker is given. A connection through the first is from whichever
//! member dialled it: the proxy finds out which by looking the connecting socket up among the
//! cluster's processes (`/proc/net/tcp` and each process's open files), so that an isolated
//! broker's own dials to the others are cut too. Kafka listeners have no proxy: clients keep
//! reaching an isolated broker, the zombie-leader case.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};

/// A member of the cluster, as a link's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Node {
    /// The coordinator (any of its replicas).
    Coordinator,
    /// Broker `id`.
    Broker(i32),
    /// A process the proxy could not tell (an admin tool dialling a broker's internal port).
    Unknown,
}

#[derive(Default)]
struct State {
    isolated: HashSet<i32>,
    /// Open connections: (from, to, the task copying them).
    conns: HashMap<u64, (Node, Node, tokio::task::AbortHandle)>,
    next: u64,
    /// The cluster's processes, to tell who dialled.
    pids: HashMap<u32, Node>,
}

impl State {
    /// Whether a link between `a` and `b` is cut (either end an isolated broker).
    fn cut(&self, a: Node, b: Node) -> bool {
        [a, b].iter().any(|n| matches!(n, Node::Broker(id) if self.isolated.contains(id)))
    }
}

/// Every proxy of one cluster, and which brokers are isolated.
#[derive(Clone, Default)]
pub struct Proxies {
    state: Arc<Mutex<State>>,
}

/// Where one proxy forwards to (set once the process behind it has bound its port).
pub type Target = Arc<Mutex<Option<SocketAddr>>>;

impl Proxies {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Record that process `pid` is `node` (after each start).
    pub fn set_pid(&self, pid: u32, node: Node) {
        self.lock().pids.insert(pid, node);
    }

    /// Forget process `pid` (once it stopped: its number may be reused).
    pub fn forget_pid(&self, pid: u32) {
        self.lock().pids.remove(&pid);
    }

    /// Cut every link of broker `id`, and refuse new ones until [`Proxies::heal`]. Returns how
    /// many open connections were cut.
    pub fn isolate(&self, id: i32) -> usize {
        let mut st = self.lock();
        st.isolated.insert(id);
        let cut: Vec<u64> = st
            .conns
            .iter()
            .filter(|(_, (from, to, _))| *from == Node::Broker(id) || *to == Node::Broker(id))
            .map(|(k, _)| *k)
            .collect();
        for k in &cut {
            if let Some((_, _, task)) = st.conns.remove(k) {
                task.abort();
            }
        }
        cut.len()
    }

    /// Let every link through again. Returns the brokers that were isolated.
    pub fn heal(&self) -> Vec<i32> {
        let mut st = self.lock();
        let mut was: Vec<i32> = st.isolated.drain().collect();
        was.sort_unstable();
        was
    }

    /// The brokers isolated now.
    pub fn isolated(&self) -> Vec<i32> {
        let mut v: Vec<i32> = self.lock().isolated.iter().copied().collect();
        v.sort_unstable();
        v
    }

    fn cut(&self, a: Node, b: Node) -> bool {
        self.lock().cut(a, b)
    }

    /// Serve `listener` as the proxy of the link to `to`, forwarding to `target`; `from` is the
    /// one process this proxy is given to, or `None` to look each connection's dialler up.
    pub fn spawn(&self, listener: TcpListener, from: Option<Node>, to: Node, target: Target) {
        let proxies = self.clone();
        tokio::spawn(async move {
            loop {
                let (client, peer) = match listener.accept().await {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        // Out of file descriptors, say: try again shortly rather than spin.
                        eprintln!("cluster: a proxy cannot accept: {e}");
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let proxies = proxies.clone();
                let target = target.clone();
                tokio::spawn(async move {
                    let from = match from {
                        Some(n) => n,
                        None => {
                            let pids = proxies.lock().pids.clone();
                            tokio::task::spawn_blocking(move || dialler(peer, &pids)).await.unwrap_or(Node::Unknown)
                        }
                    };
                    if proxies.cut(from, to) {
                        return; // dropped: the dialler sees the connection closed
                    }
                    let Some(addr) = *target.lock().unwrap_or_else(|p| p.into_inner()) else { return };
                    let Ok(server) = TcpStream::connect(addr).await else { return };
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    proxies.forward(client, server, from, to);
                });
            }
        });
    }

    fn forward(&self, mut client: TcpStream, mut server: TcpStream, from: Node, to: Node) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        // Checked again under the lock: an isolate between the accept and here cuts this one too.
        if st.cut(from, to) {
            return;
        }
        let key = st.next;
        st.next += 1;
        let me = self.clone();
        let task = tokio::spawn(async move {
            let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
            me.lock().conns.remove(&key);
        });
        st.conns.insert(key, (from, to, task.abort_handle()));
    }
}

/// Which of `pids` holds the socket that dialled from `peer` (Linux: the socket's inode in
/// `/proc/net/tcp`, then each process's open files).
fn dialler(peer: SocketAddr, pids: &HashMap<u32, Node>) -> Node {
    let Some(inode) = socket_inode(peer) else { return Node::Unknown };
    let want = format!("socket:[{inode}]");
    for (pid, node) in pids {
        let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { continue };
        for fd in dir.flatten() {
            if std::fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == want.as_str()) {
                return *node;
            }
        }
    }
    Node::Unknown
}

/// The inode of the TCP socket whose local address is `addr`.
fn socket_inode(addr: SocketAddr) -> Option<u64> {
    let SocketAddr::V4(v4) = addr else { return None };
    let want = format!("{:08X}:{:04X}", u32::from_le_bytes(v4.ip().octets()), v4.port());
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    table.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        (f.get(1) == Some(&want.as_str())).then(|| f.get(9)?.parse().ok()).flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_dialler_is_found_among_the_processes_and_isolation_cuts_its_links() {
        let echo = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let echo_addr = echo.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let (mut s, _) = echo.accept().await.unwrap();
                tokio::spawn(async move {
                    let (mut r, mut w) = s.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        let proxies = Proxies::default();
        // This test process plays broker 7: the proxy must tell it from its socket.
        proxies.set_pid(std::process::id(), Node::Broker(7));
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let proxy_addr = l.local_addr().unwrap();
        proxies.spawn(l, None, Node::Broker(1), Arc::new(Mutex::new(Some(echo_addr))));

        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let mut c = TcpStream::connect(proxy_addr).await.unwrap();
        c.write_all(b"ping").await.unwrap();
        let mut buf = [0u8; 4];
        c.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"ping");
        {
            let st = proxies.lock();
            let from: Vec<Node> = st.conns.values().map(|(f, _, _)| *f).collect();
            assert_eq!(from, vec![Node::Broker(7)], "the dialler is told by its socket");
        }
        // Isolating the dialler cuts its open link and refuses the next.
        assert_eq!(proxies.isolate(7), 1);
        let n = c.read(&mut buf).await.unwrap_or(0);
        assert_eq!(n, 0, "the open link is closed");
        let mut c2 = TcpStream::connect(proxy_addr).await.unwrap();
        let _ = c2.write_all(b"ping").await;
        assert_eq!(c2.read(&mut buf).await.unwrap_or(0), 0, "a new link is refused");
        // Healed: through again.
        assert_eq!(proxies.heal(), vec![7]);
        let mut c3 = TcpStream::connect(proxy_addr).await.unwrap();
        c3.write_all(b"pong").await.unwrap();
        c3.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"pong");
        // Another process's dial (not in the table) is Unknown, and not cut by isolating 7.
        assert_eq!(dialler("127.0.0.1:1".parse().unwrap(), &HashMap::new()), Node::Unknown);
    }
}
