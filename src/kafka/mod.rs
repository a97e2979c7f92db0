//! Kafka: the producer's settings, the publisher with its three-outcome
//! classification, the start-up probe and the `tail` consumer.

pub mod probe;
pub mod publisher;
pub mod settings;
pub mod tail;
