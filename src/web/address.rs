//! Where the live view is found: the address `stdio --web` binds (the given one exactly;
//! else `web_listen` from the config or `127.0.0.1:8766`, moving to the next free port with
//! a warning when it is taken), the file beside the config that holds the latest sign-in
//! URL and the owner key (mode 0600), and `mcp-terminal web-url`, which asks the running
//! server for a fresh one with that key.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::access::{self, Access};
use crate::limits::{WEB_DEFAULT_LISTEN, WEB_LISTEN_TRIES};
use crate::private_file;

/// The name of the file beside the config that holds the sign-in URL.
const URL_FILE: &str = "web-url";
/// The most of it read: an address and a code.
const URL_FILE_MAX: usize = 4096;

/// `stdio --web [ADDR]`: the view on its own address, checked and bound before serving.
pub struct Beside {
    pub(super) listener: TcpListener,
    pub(super) access: Arc<Access>,
    pub(super) url_file: Option<PathBuf>,
}

/// Check the address (loopback only), load the token, bind; errors are usage errors (exit
/// 2). `given`: the address on the command line, bound exactly; without it `configured`
/// (the config's `web_listen`) or the default, moving on to the next free port.
pub fn prepare_beside(
    given: Option<&str>,
    configured: Option<SocketAddr>,
    token_file: Option<PathBuf>,
    url_file: Option<PathBuf>,
) -> Result<Beside, String> {
    let (address, exact) = match given {
        Some(listen) => {
            let address = listen
                .to_socket_addrs()
                .ok()
                .and_then(|mut a| a.next())
                .ok_or_else(|| format!("--web `{listen}` is not an address of the form IP:PORT"))?;
            (address, true)
        }
        None => {
            let default = WEB_DEFAULT_LISTEN
                .parse()
                .map_err(|_| "bad default address")?;
            (configured.unwrap_or(default), false)
        }
    };
    if !address.ip().is_loopback() {
        return Err(format!(
            "--web `{address}` is not a loopback address; the live view beside stdio serves \
             this machine only"
        ));
    }
    let token = access::load_token(token_file)?;
    let listener = if exact {
        bind(address).map_err(|e| format!("cannot listen on {address}: {e}"))?
    } else {
        bind_next_free(address, configured.is_some())?
    };
    Ok(Beside {
        listener,
        access: Arc::new(Access::new(token, false, &[])),
        url_file,
    })
}

fn bind(address: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(address).and_then(|l| l.set_nonblocking(true).map(|()| l))
}

/// `address`, or the first free port after it (with a warning on stderr, whose hint
/// depends on whether the config chose `address`).
fn bind_next_free(address: SocketAddr, configured: bool) -> Result<TcpListener, String> {
    let hint = if configured {
        "`--web IP:PORT` listens on exactly one address, or fails"
    } else {
        "set `web_listen` in the config to choose"
    };
    let mut first_error = None;
    for step in 0..WEB_LISTEN_TRIES {
        let Some(port) = address.port().checked_add(step) else {
            break;
        };
        let candidate = SocketAddr::new(address.ip(), port);
        match bind(candidate) {
            Ok(listener) => {
                if step > 0 {
                    crate::say!(
                        "mcp-terminal: warning: {address} is taken; the live view listens on \
                         {candidate} instead ({hint})"
                    );
                }
                return Ok(listener);
            }
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    Err(format!(
        "cannot listen on {address} nor on the {} ports after it: {}",
        WEB_LISTEN_TRIES - 1,
        first_error.map_or_else(|| "no port left".to_owned(), |e| e.to_string())
    ))
}

/// The file beside the config (`--config`'s directory, else the default config's) that
/// holds the sign-in URL; `None` when there is no such place.
pub fn url_file(config: Option<&Path>) -> Option<PathBuf> {
    let config = match config {
        Some(path) => path.to_path_buf(),
        None => crate::config::default_config_path()?,
    };
    Some(config.with_file_name(URL_FILE))
}

/// Write `url` and the owner key `key` to `file` (a line each), readable by its owner only
/// (never through a symlink, nor into a file of another user's or a FIFO put at that
/// path); a failure is a warning, the view is served regardless.
pub fn publish(file: &Path, url: &str, key: &str) {
    let written = match file.parent().map_or(Ok(()), std::fs::create_dir_all) {
        Ok(()) => private_file::overwrite(file, format!("{url}\n{key}\n").as_bytes())
            .map_err(|refusal| refusal.describe(file)),
        Err(e) => Err(format!("`{}` cannot be made ({e})", file.display())),
    };
    if let Err(why) = written {
        crate::say!(
            "mcp-terminal: warning: cannot write the sign-in URL: {why}; the live view is \
             served, and `mcp-terminal web-url` cannot find it"
        );
    }
}

/// `mcp-terminal web-url`: a fresh one-time sign-in URL from the server whose URL and
/// owner key are in `file`.
pub fn fetch_sign_in_url(file: &Path) -> Result<String, String> {
    let published = private_file::read(file, URL_FILE_MAX).map_err(|refusal| match refusal {
        private_file::Refusal::Missing => format!(
            "no live view address in {}; start the server with --web",
            file.display()
        ),
        refusal => format!("the live view address: {}", refusal.describe(file)),
    })?;
    let published = String::from_utf8_lossy(&published);
    let mut lines = published.lines();
    let host = lines
        .next()
        .unwrap_or_default()
        .trim()
        .strip_prefix("http://")
        .and_then(|rest| rest.split('/').next())
        .filter(|host| !host.is_empty())
        .ok_or_else(|| format!("{} does not hold a live view URL", file.display()))?;
    let key = lines
        .next()
        .map(str::trim)
        .filter(|key| !key.is_empty() && key.bytes().all(|b| b.is_ascii_hexdigit()))
        .ok_or_else(|| {
            format!(
                "{} holds no owner key (a server of an older version wrote it); start the \
                 server with --web again",
                file.display()
            )
        })?;
    let refused = |e: std::io::Error| {
        format!("the live view at {host} does not answer ({e}); is the server running?")
    };
    let address = host
        .to_socket_addrs()
        .map_err(refused)?
        .next()
        .ok_or_else(|| format!("{host} is not an address"))?;
    let stream = TcpStream::connect_timeout(&address, Duration::from_secs(5)).map_err(refused)?;
    // The file outlives its server: another user may listen on that port now, and would be
    // sent the key. It is sent only on a connection this user's program accepted: the
    // kernel's record of the connection's far end, checked after connecting, so no listener
    // can take the port between the check and the request.
    match peer_owner(&stream) {
        Some(uid) if uid == nix::unistd::geteuid().as_raw() => {}
        Some(uid) => {
            return Err(format!(
                "{host} is served by another user's program (uid {uid}), not by your server: \
                 the address in {} is stale (start the server with --web again); the key \
                 was not sent",
                file.display()
            ));
        }
        None => {
            return Err(format!(
                "cannot tell whose program answers at {host} (the connection is not in \
                 /proc/net/tcp); the key was not sent"
            ));
        }
    }
    let mut stream = stream;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(refused)?;
    let request = format!(
        "GET /ui/sign-in-url HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {key}\r\n\
         Connection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).map_err(refused)?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).map_err(refused)?;
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let status = head.split(' ').nth(1).unwrap_or("");
    match status {
        "200" => Ok(body.trim().to_owned()),
        "403" => Err(format!(
            "the server at {host} did not accept the key in {}: another server wrote it; \
             start the server with --web again",
            file.display()
        )),
        _ => Err(format!(
            "the server at {host} answered {}",
            head.lines().next().unwrap_or("nothing")
        )),
    }
}

/// The user id of the socket at the far end of `stream` on this machine (the one its
/// listener accepted, which is that listener's user's), from the kernel's tables of TCP
/// sockets (`/proc/net/tcp`, `/proc/net/tcp6`); `None` when it is not there.
fn peer_owner(stream: &TcpStream) -> Option<u32> {
    let (ours, theirs) = (stream.local_addr().ok()?, stream.peer_addr().ok()?);
    // The far end's local address is our peer, its remote address ours. A connection to
    // an IPv4 address accepted on `[::]` is in the IPv6 table, its addresses v4-mapped.
    let mut places = vec![(
        "/proc/net/tcp6",
        kernel_form(theirs, true),
        kernel_form(ours, true),
    )];
    if theirs.is_ipv4() {
        places.push((
            "/proc/net/tcp",
            kernel_form(theirs, false),
            kernel_form(ours, false),
        ));
    }
    places.into_iter().find_map(|(table, local, remote)| {
        socket_uid(&std::fs::read_to_string(table).ok()?, &local, &remote)
    })
}

/// An address as the kernel's TCP tables write it: each 32-bit word of the IP in host order,
/// in hex, then the port; as IPv6 (v4-mapped) when `v6`.
fn kernel_form(address: std::net::SocketAddr, v6: bool) -> String {
    let port = address.port();
    let octets = match address.ip() {
        std::net::IpAddr::V4(ip) if !v6 => ip.octets().to_vec(),
        std::net::IpAddr::V4(ip) => ip.to_ipv6_mapped().octets().to_vec(),
        std::net::IpAddr::V6(ip) => ip.octets().to_vec(),
    };
    let words: String = octets
        .chunks(4)
        .map(|w| format!("{:08X}", u32::from_ne_bytes([w[0], w[1], w[2], w[3]])))
        .collect();
    format!("{words}:{port:04X}")
}

/// In a `/proc/net/tcp` table, the uid of the socket from `local` to `remote`.
fn socket_uid(table: &str, local: &str, remote: &str) -> Option<u32> {
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let this = fields.get(1) == Some(&local) && fields.get(2) == Some(&remote);
        this.then(|| fields.get(7)?.parse().ok()).flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_far_end_of_a_connection_is_found_with_its_owner() {
        let uid = nix::unistd::geteuid().as_raw();
        let v4 = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(v4.local_addr().unwrap()).unwrap();
        // Found before the listener accepts it, and after.
        assert_eq!(peer_owner(&client), Some(uid));
        let (accepted, _) = v4.accept().unwrap();
        assert_eq!(peer_owner(&client), Some(uid));
        drop(accepted);
        if let Ok(v6) = std::net::TcpListener::bind("[::1]:0") {
            let client = TcpStream::connect(v6.local_addr().unwrap()).unwrap();
            assert_eq!(peer_owner(&client), Some(uid));
        }
        // A server on every address is found at the loopback address it publishes, also
        // when it listens on `[::]` and the connection is IPv4.
        for any in ["0.0.0.0:0", "[::]:0"] {
            let Ok(listener) = std::net::TcpListener::bind(any) else {
                continue;
            };
            let port = listener.local_addr().unwrap().port();
            let client = TcpStream::connect(("127.0.0.1", port)).unwrap();
            assert_eq!(peer_owner(&client), Some(uid), "{any}");
        }
    }

    #[test]
    fn the_table_is_read_by_both_ends() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
            \x20  0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1001        0 1 1\n\
            \x20  1: 0100007F:1F91 0100007F:1F90 01 00000000:00000000 00:00000000 00000000  1002        0 2 1\n\
            \x20  2: 0100007F:1F90 0100007F:1F91 01 00000000:00000000 00:00000000 00000000  1003        0 3 1\n";
        assert_eq!(
            socket_uid(table, "0100007F:1F90", "0100007F:1F91"),
            Some(1003)
        );
        assert_eq!(
            socket_uid(table, "0100007F:1F91", "0100007F:1F90"),
            Some(1002)
        );
        assert_eq!(socket_uid(table, "0100007F:1F90", "0100007F:0050"), None);
        let at = std::net::SocketAddr::from(([127, 0, 0, 1], 8080));
        assert_eq!(kernel_form(at, false), "0100007F:1F90");
        assert_eq!(
            kernel_form(at, true),
            "0000000000000000FFFF00000100007F:1F90"
        );
    }
}
