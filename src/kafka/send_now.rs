//! Sending at once when the relay has caught up with the slot.
//!
//! `linger.ms` makes librdkafka wait for a batch to fill: under a backlog
//! that is what keeps produce requests large, and on a caught-up stream it
//! is latency every record pays. librdkafka cannot change its linger while
//! it runs, but `rd_kafka_flush` sets a flag under which every partition
//! sends at once, for as long as the call waits. When the session has
//! handed librdkafka the last record the walsender had (the reader saw its
//! keepalive), it asks this thread to hold that flag until what is queued
//! is delivered, or for at most one linger. A drain, whose walsender never
//! waits for WAL, never asks, and batches as before.

use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

/// What the thread is asked to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ask {
    Nothing,
    SendNow,
    Stop,
}

/// The thread that flushes on request, and its doorbell.
pub(crate) struct SendNow {
    bell: Arc<(Mutex<Ask>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

impl SendNow {
    /// Starts the thread; `flush(window)` holds the producer's flush for at
    /// most `window`.
    pub(crate) fn start(
        window: Duration,
        flush: impl Fn(Duration) + Send + 'static,
    ) -> std::io::Result<SendNow> {
        let bell = Arc::new((Mutex::new(Ask::Nothing), Condvar::new()));
        let theirs = Arc::clone(&bell);
        let thread = std::thread::Builder::new()
            .name("send-now".into())
            .spawn(move || {
                let (ask, rung) = &*theirs;
                loop {
                    let mut a = ask.lock().unwrap_or_else(PoisonError::into_inner);
                    while *a == Ask::Nothing {
                        a = rung.wait(a).unwrap_or_else(PoisonError::into_inner);
                    }
                    if *a == Ask::Stop {
                        return;
                    }
                    // Asks while this flush runs are answered by it: the
                    // flag covers what they sent.
                    *a = Ask::Nothing;
                    drop(a);
                    flush(window);
                }
            })?;
        Ok(SendNow {
            bell,
            thread: Some(thread),
        })
    }

    /// Asks for what librdkafka holds to be sent without waiting out its
    /// linger. Never blocks.
    pub(crate) fn ring(&self) {
        let (ask, rung) = &*self.bell;
        let mut a = ask.lock().unwrap_or_else(PoisonError::into_inner);
        if *a == Ask::Nothing {
            *a = Ask::SendNow;
            rung.notify_one();
        }
    }
}

impl Drop for SendNow {
    fn drop(&mut self) {
        let (ask, rung) = &*self.bell;
        *ask.lock().unwrap_or_else(PoisonError::into_inner) = Ask::Stop;
        rung.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The linger a producer configuration sets (librdkafka's default is 5 ms;
/// `queue.buffering.max.ms` is its other name).
pub(crate) fn linger(cc: &rdkafka::config::ClientConfig) -> Duration {
    let ms = cc
        .get("linger.ms")
        .or_else(|| cc.get("queue.buffering.max.ms"))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or(5.0);
    Duration::from_secs_f64(ms.max(0.0) / 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn a_ring_flushes_once_with_the_window_and_rings_during_a_flush_are_not_lost() {
        let calls = Arc::new(AtomicUsize::new(0));
        let windows = Arc::new(Mutex::new(Vec::new()));
        let (c, w) = (Arc::clone(&calls), Arc::clone(&windows));
        let send_now = SendNow::start(Duration::from_millis(7), move |window| {
            w.lock().unwrap().push(window);
            std::thread::sleep(Duration::from_millis(20));
            c.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap();
        send_now.ring();
        // Rung while the first flush runs (it has begun, and sleeps 20 ms):
        // one more flush follows it.
        let began = std::time::Instant::now() + Duration::from_secs(5);
        while windows.lock().unwrap().is_empty() && std::time::Instant::now() < began {
            std::thread::sleep(Duration::from_millis(1));
        }
        send_now.ring();
        send_now.ring();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while calls.load(Ordering::SeqCst) < 2 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        assert!(windows
            .lock()
            .unwrap()
            .iter()
            .all(|w| *w == Duration::from_millis(7)));
        // Dropping stops the thread (the test would hang otherwise).
        drop(send_now);
    }

    #[test]
    fn the_linger_is_read_under_either_name_and_defaults_to_librdkafkas() {
        let mut cc = rdkafka::config::ClientConfig::new();
        assert_eq!(linger(&cc), Duration::from_millis(5));
        cc.set("queue.buffering.max.ms", "20");
        assert_eq!(linger(&cc), Duration::from_millis(20));
        cc.set("linger.ms", "0");
        assert_eq!(linger(&cc), Duration::ZERO);
    }
}
