//! What the relay's own principal may do on a topic, as the brokers say
//! (KIP-430's authorized operations, through librdkafka's DescribeTopics):
//! the one way a least-privilege client can tell a missing WRITE ACL
//! before producing. rust-rdkafka does not wrap this call, so it is made
//! here through rdkafka-sys, with every pointer checked and every object
//! freed on every path.

use std::ffi::{CStr, CString};
use std::time::Duration;

use rdkafka::bindings as rd;
use rdkafka::client::{Client, ClientContext};
use rdkafka::error::RDKafkaErrorCode;

/// One topic's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Access {
    /// The operations the principal holds (ALL counts as every one).
    Granted { write: bool, describe: bool },
    /// The broker refused to describe it (e.g. no DESCRIBE, or missing).
    Refused(RDKafkaErrorCode),
    /// The broker listed no operations (no authorizer, or too old to say).
    Unknown,
}

/// Frees what librdkafka allocated, whatever the way out.
struct Owned<T> {
    ptr: *mut T,
    free: unsafe extern "C" fn(*mut T),
}

impl<T> Drop for Owned<T> {
    fn drop(&mut self) {
        if !self.ptr.is_null() {
            // SAFETY: `ptr` came from the librdkafka constructor that `free`
            // belongs to, and is freed once, here.
            unsafe { (self.free)(self.ptr) }
        }
    }
}

/// Asks the brokers what the principal may do on `topics`; `None` when the
/// brokers do not answer in `timeout` (the caller has other probes for that).
pub(crate) fn topic_access<C: ClientContext>(
    client: &Client<C>,
    topics: &[String],
    timeout: Duration,
) -> Option<Vec<(String, Access)>> {
    if topics.is_empty() {
        return Some(Vec::new());
    }
    let names: Vec<CString> = topics
        .iter()
        .filter_map(|t| CString::new(t.as_str()).ok())
        .collect();
    let mut pointers: Vec<*const std::os::raw::c_char> = names.iter().map(|n| n.as_ptr()).collect();
    let rk = client.native_ptr();
    let timeout_ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
    // SAFETY: each call gets live pointers: `rk` from a live client, the
    // names from `names` (alive until the end of this function), and the
    // objects created here, which `Owned` frees once.
    unsafe {
        let collection = Owned {
            ptr: rd::rd_kafka_TopicCollection_of_topic_names(pointers.as_mut_ptr(), pointers.len()),
            free: rd::rd_kafka_TopicCollection_destroy,
        };
        let options = Owned {
            ptr: rd::rd_kafka_AdminOptions_new(
                rk,
                rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DESCRIBETOPICS,
            ),
            free: rd::rd_kafka_AdminOptions_destroy,
        };
        let queue = Owned {
            ptr: rd::rd_kafka_queue_new(rk),
            free: rd::rd_kafka_queue_destroy,
        };
        if collection.ptr.is_null() || options.ptr.is_null() || queue.ptr.is_null() {
            return None;
        }
        let refused = rd::rd_kafka_AdminOptions_set_include_authorized_operations(options.ptr, 1);
        if !refused.is_null() {
            rd::rd_kafka_error_destroy(refused);
            return None;
        }
        let mut errstr = [0 as std::os::raw::c_char; 256];
        rd::rd_kafka_AdminOptions_set_request_timeout(
            options.ptr,
            timeout_ms,
            errstr.as_mut_ptr(),
            errstr.len(),
        );
        rd::rd_kafka_DescribeTopics(rk, collection.ptr, options.ptr, queue.ptr);
        let event = Owned {
            ptr: rd::rd_kafka_queue_poll(queue.ptr, timeout_ms.saturating_add(1000)),
            free: rd::rd_kafka_event_destroy,
        };
        if event.ptr.is_null()
            || rd::rd_kafka_event_error(event.ptr)
                != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR
        {
            return None;
        }
        let result = rd::rd_kafka_event_DescribeTopics_result(event.ptr);
        if result.is_null() {
            return None;
        }
        let mut count = 0usize;
        let descriptions = rd::rd_kafka_DescribeTopics_result_topics(result, &mut count);
        if descriptions.is_null() {
            return None;
        }
        let mut out = Vec::with_capacity(count);
        for i in 0..count {
            let description = *descriptions.add(i);
            if description.is_null() {
                continue;
            }
            let name_ptr = rd::rd_kafka_TopicDescription_name(description);
            if name_ptr.is_null() {
                continue;
            }
            let name = CStr::from_ptr(name_ptr).to_string_lossy().into_owned();
            let error = rd::rd_kafka_TopicDescription_error(description);
            if !error.is_null() {
                let code = rd::rd_kafka_error_code(error);
                if code != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
                    out.push((name, Access::Refused(code.into())));
                    continue;
                }
            }
            let mut n = 0usize;
            // Read as plain integers: a value this build's enum does not
            // know must not be turned into it.
            let ops = rd::rd_kafka_TopicDescription_authorized_operations(description, &mut n)
                as *const u32;
            if ops.is_null() || n == 0 {
                out.push((name, Access::Unknown));
                continue;
            }
            let ops: &[u32] = std::slice::from_raw_parts(ops, n);
            let holds = |op: rd::rd_kafka_AclOperation_t| {
                ops.iter().any(|&o| {
                    o == op as u32
                        || o == rd::rd_kafka_AclOperation_t::RD_KAFKA_ACL_OPERATION_ALL as u32
                })
            };
            out.push((
                name,
                Access::Granted {
                    write: holds(rd::rd_kafka_AclOperation_t::RD_KAFKA_ACL_OPERATION_WRITE),
                    describe: holds(rd::rd_kafka_AclOperation_t::RD_KAFKA_ACL_OPERATION_DESCRIBE),
                },
            ));
        }
        Some(out)
    }
}
