//! Receivers that misbehave on purpose, written on raw TCP so they can do what no
//! well-behaved HTTP server would: trickle, never end, reset, never read.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What a hostile receiver does with each request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behaviour {
    /// Sends the status line, then one header byte a second, never finishing the head.
    TrickleHeaders,
    /// A complete head announcing 200, then one body byte a second.
    TrickleBody,
    /// 200 with a chunked body that never ends.
    EndlessBody,
    /// 200 announcing a 10 GB body, and sends it as fast as the client takes it.
    HugeBody,
    /// 302 to itself, for ever.
    RedirectLoop,
    /// Accepts the connection and never reads from it or answers.
    AcceptNeverRead,
    /// Fails at random (500, no answer, a reset) at most twice per submission, then 200.
    Chaos,
}

pub struct HostileReceiver {
    pub addr: SocketAddr,
    /// Requests (or, for `AcceptNeverRead`, connections) received.
    pub hits: Arc<AtomicUsize>,
    /// For `Chaos`: requests per submission id, and how many of each succeeded.
    pub chaos: Arc<Mutex<HashMap<String, (usize, usize)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for HostileReceiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl HostileReceiver {
    pub async fn start(behaviour: Behaviour) -> HostileReceiver {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        let hits = Arc::new(AtomicUsize::new(0));
        let chaos = Arc::new(Mutex::new(HashMap::new()));
        let (task_hits, task_chaos) = (hits.clone(), chaos.clone());
        let task = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                if behaviour == Behaviour::AcceptNeverRead {
                    task_hits.fetch_add(1, Ordering::SeqCst);
                    held.push(stream);
                    continue;
                }
                let (hits, chaos) = (task_hits.clone(), task_chaos.clone());
                tokio::spawn(async move {
                    let _ = serve(stream, behaviour, addr, hits, chaos).await;
                });
            }
        });
        HostileReceiver {
            addr,
            hits,
            chaos,
            task,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}/hook", self.addr)
    }

    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

/// One request: its head and body, or `None` when the client closed the connection.
async fn read_request(stream: &mut TcpStream) -> Option<Vec<u8>> {
    let mut data = Vec::new();
    let mut buffer = [0u8; 8192];
    let head_end = loop {
        if let Some(at) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let read = stream.read(&mut buffer).await.ok()?;
        if read == 0 || data.len() > 1 << 20 {
            return None;
        }
        data.extend_from_slice(&buffer[..read]);
    };
    let head = String::from_utf8_lossy(&data[..head_end]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|line| line.strip_prefix("content-length:"))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(0);
    while data.len() < head_end + length {
        let read = stream.read(&mut buffer).await.ok()?;
        if read == 0 {
            return None;
        }
        data.extend_from_slice(&buffer[..read]);
    }
    Some(data[head_end..head_end + length].to_vec())
}

async fn serve(
    mut stream: TcpStream,
    behaviour: Behaviour,
    addr: SocketAddr,
    hits: Arc<AtomicUsize>,
    chaos: Arc<Mutex<HashMap<String, (usize, usize)>>>,
) -> std::io::Result<()> {
    // At most a thousand requests on one connection, each bounded in time.
    for _ in 0..1000 {
        let Some(body) = read_request(&mut stream).await else {
            return Ok(());
        };
        hits.fetch_add(1, Ordering::SeqCst);
        match behaviour {
            Behaviour::TrickleHeaders => {
                stream.write_all(b"HTTP/1.1 200 OK\r\nX-Trickle: ").await?;
                for _ in 0..120 {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    stream.write_all(b"a").await?;
                }
                return Ok(());
            }
            Behaviour::TrickleBody => {
                stream
                    .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
                    .await?;
                for _ in 0..120 {
                    stream.write_all(b"a").await?;
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                return Ok(());
            }
            Behaviour::EndlessBody => {
                stream
                    .write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
                    .await?;
                let chunk = format!("4000\r\n{}\r\n", "x".repeat(0x4000));
                // Ends when the client hangs up (a write fails), or after ~16 GB.
                for _ in 0..1_000_000 {
                    stream.write_all(chunk.as_bytes()).await?;
                }
                return Ok(());
            }
            Behaviour::HugeBody => {
                stream
                    .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 10000000000\r\n\r\n")
                    .await?;
                let block = vec![b'0'; 1 << 16];
                for _ in 0..(10_000_000_000u64 >> 16) {
                    stream.write_all(&block).await?;
                }
                return Ok(());
            }
            Behaviour::RedirectLoop => {
                let answer = format!(
                    "HTTP/1.1 302 Found\r\nLocation: http://{addr}/hook\r\nContent-Length: 0\r\n\r\n"
                );
                stream.write_all(answer.as_bytes()).await?;
            }
            Behaviour::AcceptNeverRead => unreachable!("handled at accept"),
            Behaviour::Chaos => {
                let id = submission_id(&body);
                let failures_so_far = {
                    let mut seen = chaos.lock().expect("chaos lock");
                    let entry = seen.entry(id.clone()).or_insert((0, 0));
                    entry.0 += 1;
                    entry.0 - 1 - entry.1
                };
                let roll: u8 = rand::random();
                let fail = failures_so_far < 2 && roll < 100;
                if !fail {
                    chaos
                        .lock()
                        .expect("chaos lock")
                        .entry(id)
                        .or_insert((0, 0))
                        .1 += 1;
                    stream
                        .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                        .await?;
                    continue;
                }
                match roll % 3 {
                    0 => {
                        stream
                            .write_all(
                                b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n",
                            )
                            .await?;
                    }
                    1 => {
                        // Longer than any test's read timeout, then hang up.
                        tokio::time::sleep(Duration::from_secs(5)).await;
                        return Ok(());
                    }
                    _ => {
                        // A reset: no FIN, an RST. (A zero linger never blocks on drop,
                        // which is what the deprecation warns of.)
                        #[allow(deprecated)]
                        stream.set_linger(Some(Duration::ZERO))?;
                        return Ok(());
                    }
                }
            }
        }
    }
    Ok(())
}

/// The `submission.id` of a webhook body.
fn submission_id(body: &[u8]) -> String {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["submission"]["id"].as_str().map(str::to_string))
        .unwrap_or_default()
}
