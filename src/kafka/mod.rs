//! Kafka: the producer's settings, the publisher with its three-outcome
//! classification, the start-up probe, the partitions Kafka holds (from librdkafka's
//! statistics), the new-topic readiness wait, the
//! topics a connector's `topic.creation.*` creates, and the `tail` consumer.

pub(crate) mod access;
pub mod enqueue;
pub(crate) mod held;
pub mod limits;
pub mod placement;
pub(crate) mod probe;
pub(crate) mod progress;
pub(crate) mod publisher;
pub mod readiness;
pub(crate) mod send_now;
pub mod settings;
pub(crate) mod tail;
pub mod topic_creation;
pub(crate) mod window;
