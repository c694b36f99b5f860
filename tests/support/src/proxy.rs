//! A TCP proxy on loopback that can stop forwarding without closing anything: the network
//! to the database "silently dropping packets", as seen from the service (its sends are
//! accepted by the proxy's sockets, nothing ever comes back).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

pub struct Proxy {
    pub addr: SocketAddr,
    blackhole: Arc<AtomicBool>,
    _task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Forwards connections on a new loopback port to `target`.
    pub async fn start(target: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().expect("proxy address");
        let blackhole = Arc::new(AtomicBool::new(false));
        let holes = blackhole.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let holes = holes.clone();
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(target).await else {
                        return;
                    };
                    let (client_read, client_write) = client.into_split();
                    let (server_read, server_write) = server.into_split();
                    tokio::join!(
                        pump(client_read, server_write, holes.clone()),
                        pump(server_read, client_write, holes),
                    );
                });
            }
        });
        Proxy {
            addr,
            blackhole,
            _task: task,
        }
    }

    /// Stops (true) or resumes (false) forwarding. While stopped, bytes are read from each
    /// side and dropped, so the sender's kernel sees them acknowledged.
    pub fn set_blackhole(&self, on: bool) {
        self.blackhole.store(on, Ordering::SeqCst);
    }
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    blackhole: Arc<AtomicBool>,
) {
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        let read =
            match tokio::time::timeout(Duration::from_secs(600), from.read(&mut buffer)).await {
                Ok(Ok(0)) | Ok(Err(_)) | Err(_) => return,
                Ok(Ok(read)) => read,
            };
        if blackhole.load(Ordering::SeqCst) {
            continue;
        }
        if to.write_all(&buffer[..read]).await.is_err() {
            return;
        }
    }
}
