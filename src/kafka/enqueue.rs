//! A record into librdkafka's queue through a topic handle made once per
//! destination. rust-rdkafka's `send` names the topic, and for every record
//! librdkafka then copies the name into a C string, takes its client's
//! write lock (which its broker threads also take) and compares the name
//! with every topic it knows: with 1 000 destinations, about 500 string
//! comparisons per record under that lock. A handle skips all of it.
//!
//! The one unsafe block here passes librdkafka pointers that live for the
//! call (the record's bytes, copied by `RD_KAFKA_MSG_F_COPY`), or that it
//! owns from then on (the headers, on success), or that this module made
//! and destroys before the producer (the topic handles).

use std::ffi::{c_void, CString};
use std::os::raw::c_char;
use std::ptr;
use std::sync::{Arc, Mutex};

use rdkafka::bindings as rd;
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::producer::{Producer, ProducerContext, ThreadedProducer};
use rdkafka::util::IntoOpaque;

use crate::router::Record;

/// One record's parts, as they go to librdkafka.
pub struct Outgoing<'a, H> {
    pub topic: &'a str,
    /// `None` is a null key.
    pub key: Option<&'a [u8]>,
    /// `None` is a tombstone.
    pub value: Option<&'a [u8]>,
    /// Names and values in order; a `None` value is a null header.
    pub headers: H,
    /// `None` lets the producer's partitioner choose.
    pub partition: Option<i32>,
    pub timestamp_ms: Option<i64>,
}

impl<'a> Outgoing<'a, crate::router::record::HeaderIter<'a>> {
    /// A mapped record's parts.
    pub fn of(record: &'a Record) -> Self {
        Outgoing {
            topic: &record.topic,
            key: record.key_bytes(),
            value: record.value_bytes(),
            headers: record.headers(),
            partition: record.partition,
            timestamp_ms: record.timestamp_ms,
        }
    }
}

/// A topic handle of the producer below.
struct Handle(*mut rd::rd_kafka_topic_t);

// SAFETY: librdkafka's topic handles may be used and destroyed from any
// thread.
unsafe impl Send for Handle {}

/// A producer and a topic handle for each destination it has written to.
pub struct Enqueuer<C: ProducerContext + 'static> {
    /// Destroyed in `drop`, while `producer` still holds the client.
    handles: Mutex<foldhash::HashMap<Box<str>, Handle>>,
    producer: Arc<ThreadedProducer<C>>,
}

impl<C: ProducerContext + 'static> Enqueuer<C> {
    pub fn new(producer: Arc<ThreadedProducer<C>>) -> Self {
        Enqueuer {
            handles: Mutex::new(foldhash::HashMap::default()),
            producer,
        }
    }

    pub fn producer(&self) -> &Arc<ThreadedProducer<C>> {
        &self.producer
    }

    /// Enqueues one record; `opaque` comes back in its delivery report. On
    /// an error nothing was enqueued and `opaque` is dropped.
    pub fn enqueue<'a, H>(
        &self,
        out: Outgoing<'a, H>,
        opaque: C::DeliveryOpaque,
    ) -> Result<(), RDKafkaErrorCode>
    where
        H: Iterator<Item = (&'a str, Option<&'a [u8]>)>,
    {
        let rkt = self.handle(out.topic)?;
        let bytes = |b: Option<&[u8]>| {
            b.map_or((ptr::null_mut(), 0), |b| {
                (b.as_ptr() as *mut c_void, b.len())
            })
        };
        let (value, value_len) = bytes(out.value);
        let (key, key_len) = bytes(out.key);
        let rk = self.producer.client().native_ptr();
        // SAFETY: `rk` is the live client `self.producer` holds, and `rkt`
        // its topic handle, destroyed only in `drop`. The headers object is
        // made here and given to librdkafka on success, destroyed here on
        // failure. Names, values, key and value are read during the calls
        // only (`header_add` and `RD_KAFKA_MSG_F_COPY` copy them). The
        // opaque pointer is made here and, on failure, taken back once.
        unsafe {
            let headers = rd::rd_kafka_headers_new(out.headers.size_hint().0.max(1));
            for (name, value) in out.headers {
                let (v, v_len) = value.map_or((ptr::null(), 0), |v| {
                    (v.as_ptr() as *const c_void, v.len() as isize)
                });
                rd::rd_kafka_header_add(
                    headers,
                    name.as_ptr() as *const c_char,
                    name.len() as isize,
                    v,
                    v_len,
                );
            }
            let opaque = opaque.into_ptr();
            let err = rd::rd_kafka_producev(
                rk,
                rd::rd_kafka_vtype_t::RD_KAFKA_VTYPE_RKT,
                rkt,
                rd::rd_kafka_vtype_t::RD_KAFKA_VTYPE_PARTITION,
                out.partition.unwrap_or(-1),
                rd::rd_kafka_vtype_t::RD_KAFKA_VTYPE_MSGFLAGS,
                rd::RD_KAFKA_MSG_F_COPY,
                rd::rd_kafka_vtype_t::RD_KAFKA_VTYPE_VALUE,
                value,
                value_len,
                rd::rd_kafka_vtype_t::RD_KAFKA_VTYPE_KEY,
                key,
                key_len,
                rd::rd_kafka_vtype_t::RD_KAFKA_VTYPE_OPAQUE,
                opaque,
                rd::rd_kafka_vtype_t::RD_KAFKA_VTYPE_TIMESTAMP,
                out.timestamp_ms.unwrap_or(0),
                rd::rd_kafka_vtype_t::RD_KAFKA_VTYPE_HEADERS,
                headers,
                rd::rd_kafka_vtype_t::RD_KAFKA_VTYPE_END,
            );
            if err != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
                rd::rd_kafka_headers_destroy(headers);
                drop(C::DeliveryOpaque::from_ptr(opaque));
                return Err(err.into());
            }
        }
        Ok(())
    }

    /// The handle of `topic`, made on its first record.
    fn handle(&self, topic: &str) -> Result<*mut rd::rd_kafka_topic_t, RDKafkaErrorCode> {
        let mut handles = self.handles.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(h) = handles.get(topic) {
            return Ok(h.0);
        }
        let name = CString::new(topic).map_err(|_| RDKafkaErrorCode::InvalidTopic)?;
        // SAFETY: a live client and a NUL-terminated name; a null `conf`
        // takes the client's default topic configuration.
        let rkt = unsafe {
            rd::rd_kafka_topic_new(
                self.producer.client().native_ptr(),
                name.as_ptr(),
                ptr::null_mut(),
            )
        };
        if rkt.is_null() {
            // SAFETY: reads this thread's last librdkafka error.
            return Err(unsafe { rd::rd_kafka_last_error() }.into());
        }
        handles.insert(topic.into(), Handle(rkt));
        Ok(rkt)
    }
}

impl<C: ProducerContext + 'static> Drop for Enqueuer<C> {
    fn drop(&mut self) {
        let handles = self.handles.get_mut().unwrap_or_else(|e| e.into_inner());
        for (_, h) in handles.drain() {
            // SAFETY: made by `rd_kafka_topic_new` on the client that
            // `self.producer` still holds; destroyed once, here.
            unsafe { rd::rd_kafka_topic_destroy(h.0) };
        }
    }
}
