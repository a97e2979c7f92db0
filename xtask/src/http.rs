//! The few HTTP calls the services need (Kafka Connect's and Toxiproxy's
//! REST APIs on loopback): HTTP/1.1, one request a connection, no TLS.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};

/// A response: its status and its body as sent (a chunked body keeps its
/// chunk sizes; callers only search it or read the status).
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub body: String,
}

impl Response {
    pub fn ok(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

/// A request to `http://{addr}{path}`: the method and, for POST, a JSON body.
pub struct Request<'a> {
    pub method: &'a str,
    pub addr: &'a str,
    pub path: &'a str,
    pub json: Option<&'a str>,
}

pub fn send(req: &Request) -> Result<Response> {
    let mut stream =
        TcpStream::connect(req.addr).with_context(|| format!("connect {}", req.addr))?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    stream.set_write_timeout(Some(Duration::from_secs(30)))?;
    let body = req.json.unwrap_or("");
    let mut head = format!(
        "{} {} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nAccept: */*\r\n",
        req.method, req.path, req.addr
    );
    if req.json.is_some() {
        head.push_str("Content-Type: application/json\r\n");
    }
    head.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    stream.write_all(head.as_bytes())?;
    stream.write_all(body.as_bytes())?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    parse(&String::from_utf8_lossy(&raw))
}

pub fn get(addr: &str, path: &str) -> Result<Response> {
    send(&Request {
        method: "GET",
        addr,
        path,
        json: None,
    })
}

fn parse(raw: &str) -> Result<Response> {
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((raw, ""));
    let status_line = head.lines().next().unwrap_or_default();
    let mut words = status_line.split_whitespace();
    match words.next() {
        Some(v) if v.starts_with("HTTP/") => {}
        _ => bail!("not an HTTP response: {status_line:?}"),
    }
    let status = words
        .next()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| anyhow!("no status in {status_line:?}"))?;
    Ok(Response {
        status,
        body: body.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufRead;
    use std::net::TcpListener;

    #[test]
    fn parses_status_and_body() {
        let r = parse("HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n{}").unwrap();
        assert_eq!((r.status, r.body.as_str()), (201, "{}"));
        assert!(r.ok());
        let r = parse("HTTP/1.1 404 Not Found\r\n\r\n").unwrap();
        assert!(!r.ok());
        assert!(parse("SSH-2.0-OpenSSH\r\n").is_err());
    }

    #[test]
    fn sends_a_json_post_and_reads_the_answer() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let server = std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            let mut reader = std::io::BufReader::new(conn.try_clone().unwrap());
            let mut lines = Vec::new();
            let mut length = 0;
            loop {
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                if line == "\r\n" {
                    break;
                }
                if let Some(v) = line.strip_prefix("Content-Length: ") {
                    length = v.trim().parse().unwrap();
                }
                lines.push(line);
            }
            let mut body = vec![0; length];
            reader.read_exact(&mut body).unwrap();
            conn.write_all(b"HTTP/1.1 201 Created\r\nConnection: close\r\n\r\ncreated")
                .unwrap();
            (lines, String::from_utf8(body).unwrap())
        });
        let r = send(&Request {
            method: "POST",
            addr: &addr,
            path: "/proxies",
            json: Some(r#"{"name":"pg"}"#),
        })
        .unwrap();
        assert_eq!((r.status, r.body.as_str()), (201, "created"));
        let (lines, body) = server.join().unwrap();
        assert_eq!(lines[0], "POST /proxies HTTP/1.1\r\n");
        assert!(lines.contains(&"Content-Type: application/json\r\n".to_string()));
        assert_eq!(body, r#"{"name":"pg"}"#);
    }

    #[test]
    fn a_closed_port_is_an_error() {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        assert!(get(&format!("127.0.0.1:{port}"), "/version").is_err());
    }
}
