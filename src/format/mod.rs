//! Text formats the relay writes and reads beside its own: Java
//! `.properties` files and YAML for Kubernetes resources. A leaf: no module
//! of the crate below it.

pub mod properties;
pub mod yaml;
