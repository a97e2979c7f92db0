//! The relay's container image, for the image tests, run with
//! testcontainers through podman's Docker-compatible API: the socket
//! `scripts/podman.sh socket` starts with the project's podman settings
//! (rootful, runc, vfs storage, so it sees the image `scripts/image.sh`
//! built), named by `DOCKER_HOST`; the image by `OUTBOX_TEST_IMAGE`.
//! Containers run on the host network. PostgreSQL and Kafka are not
//! containers: no image registry is reachable here, so the services script
//! runs them.

use std::path::Path;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use testcontainers::bollard::errors::Error as BollardError;
use testcontainers::bollard::models::{ContainerCreateBody, ContainerState, HostConfig};
use testcontainers::bollard::query_parameters::{
    KillContainerOptionsBuilder, LogsOptionsBuilder, RemoveContainerOptionsBuilder,
    StopContainerOptionsBuilder,
};
use testcontainers::bollard::Docker;
use testcontainers::core::{AccessMode, Mount};
use testcontainers::runners::AsyncRunner;
use testcontainers::{ContainerAsync, GenericImage, ImageExt};

use crate::Services;

/// The image under test, as `name:tag`; a missing variable fails the test
/// (the suite's script builds the image first).
pub fn image() -> String {
    std::env::var("OUTBOX_TEST_IMAGE").unwrap_or_else(|_| {
        panic!("OUTBOX_TEST_IMAGE: scripts/test.sh builds the image with scripts/image.sh")
    })
}

/// The image as testcontainers takes it.
fn generic() -> GenericImage {
    let image = image();
    let (name, tag) = image
        .rsplit_once(':')
        .unwrap_or_else(|| panic!("OUTBOX_TEST_IMAGE {image:?} has no tag"));
    GenericImage::new(name, tag)
}

/// The API client, for what testcontainers does not say: the image's
/// configuration, a container's state, a signal.
pub fn docker() -> Docker {
    let host = std::env::var("DOCKER_HOST").unwrap_or_else(|_| {
        panic!(
            "DOCKER_HOST: scripts/test.sh exports podman's API socket (scripts/podman.sh socket)"
        )
    });
    let path = host.strip_prefix("unix://").unwrap_or(&host);
    Docker::connect_with_unix(path, 120, testcontainers::bollard::API_DEFAULT_VERSION)
        .unwrap_or_else(|e| panic!("podman's API at {host}: {e}"))
}

/// The image's user and labels.
pub async fn image_config() -> (String, std::collections::HashMap<String, String>) {
    let inspected = docker()
        .inspect_image(&image())
        .await
        .unwrap_or_else(|e| panic!("inspecting {}: {e}", image()));
    let config = inspected.config.unwrap_or_default();
    (
        config.user.unwrap_or_default(),
        config.labels.unwrap_or_default(),
    )
}

/// The image run once without a network, to its end: its exit code and
/// output, or why it could not start (`entrypoint` replaces the image's).
///
/// Through the API client, not testcontainers: a container that exits
/// before testcontainers' start returns is reported by podman 4.3 in the
/// state `stopped`, which the client's model refuses ("unknown variant
/// `stopped`"), so testcontainers' start fails on a run this short.
pub async fn run_once(entrypoint: Option<&str>, args: &[&str]) -> Result<(i64, String), String> {
    let docker = docker();
    let body = ContainerCreateBody {
        image: Some(image()),
        cmd: Some(args.iter().map(|a| a.to_string()).collect()),
        entrypoint: entrypoint.map(|e| vec![e.to_string()]),
        host_config: Some(HostConfig {
            network_mode: Some("none".into()),
            ..HostConfig::default()
        }),
        ..ContainerCreateBody::default()
    };
    let id = docker
        .create_container(None, body)
        .await
        .map_err(|e| e.to_string())?
        .id;
    let ran = async {
        docker
            .start_container(&id, None)
            .await
            .map_err(|e| e.to_string())?;
        let code = match docker.wait_container(&id, None).next().await {
            Some(Ok(done)) => done.status_code,
            Some(Err(BollardError::DockerContainerWaitError { code, .. })) => code,
            Some(Err(e)) => return Err(e.to_string()),
            None => return Err("no answer to wait".into()),
        };
        let logs = LogsOptionsBuilder::new().stdout(true).build();
        let mut out = Vec::new();
        let mut stream = docker.logs(&id, Some(logs));
        while let Some(chunk) = stream.next().await {
            out.extend_from_slice(&chunk.map_err(|e| e.to_string())?.into_bytes());
        }
        Ok((code, String::from_utf8_lossy(&out).into_owned()))
    }
    .await;
    let force = RemoveContainerOptionsBuilder::new().force(true).build();
    let _ = docker.remove_container(&id, Some(force)).await;
    ran
}

/// How a container is run.
pub struct Run<'a> {
    pub name: &'a str,
    /// The configuration file on the host, mounted read-only at the image's
    /// default path.
    pub config: &'a Path,
    /// A memory limit (and no swap beyond it), bytes.
    pub memory: Option<i64>,
    /// The relay's arguments (`run` when empty: the image's default).
    pub args: &'a [&'a str],
}

/// A relay container; removed on drop.
pub struct Container {
    pub name: String,
    inner: ContainerAsync<GenericImage>,
    docker: Docker,
}

impl Container {
    /// Starts a container of the image with a read-only root file system,
    /// on the host network, as the image's non-root user.
    pub async fn start(s: &Services, run: &Run<'_>) -> Container {
        let docker = docker();
        // A container a failed run left behind under this name goes.
        let force = RemoveContainerOptionsBuilder::new().force(true).build();
        let _ = docker.remove_container(run.name, Some(force)).await;
        let memory = run.memory;
        let mut request = generic()
            .with_container_name(run.name)
            .with_readonly_rootfs(true)
            .with_env_var("OUTBOX_TEST_PG_PASSWORD", &s.pg_password)
            .with_env_var("OUTBOX_CDC_LOG_FORMAT", "human")
            .with_mount(
                Mount::bind_mount(
                    run.config.display().to_string(),
                    "/etc/outbox-cdc/outbox-cdc.toml",
                )
                .with_access_mode(AccessMode::ReadOnly),
            )
            .with_host_config_modifier(move |config| {
                config.network_mode = Some("host".into());
                if let Some(bytes) = memory {
                    config.memory = Some(bytes);
                    config.memory_swap = Some(bytes);
                }
            });
        if !run.args.is_empty() {
            request = request.with_cmd(run.args.iter().copied());
        }
        let inner = request
            .start()
            .await
            .unwrap_or_else(|e| panic!("starting {}: {e}", run.name));
        Container {
            name: run.name.to_string(),
            inner,
            docker,
        }
    }

    /// Everything the container wrote so far.
    pub async fn logs(&self) -> String {
        let out = self.inner.stdout_to_vec().await.unwrap_or_default();
        let err = self.inner.stderr_to_vec().await.unwrap_or_default();
        format!(
            "{}{}",
            String::from_utf8_lossy(&out),
            String::from_utf8_lossy(&err)
        )
    }

    /// The container's state. Podman may answer in a state the client's
    /// model does not know (`stopped`, while it cleans up after an exit):
    /// asked again.
    async fn state(&self) -> ContainerState {
        let mut tries = 0;
        loop {
            match self.docker.inspect_container(self.inner.id(), None).await {
                Ok(inspected) => return inspected.state.unwrap_or_default(),
                Err(_) if tries < 50 => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("inspecting {}: {e}", self.name),
            }
        }
    }

    pub async fn running(&self) -> bool {
        self.state().await.running.unwrap_or(false)
    }

    /// Whether the kernel killed it for its memory limit.
    pub async fn oom_killed(&self) -> bool {
        self.state().await.oom_killed.unwrap_or(false)
    }

    /// Waits (up to `within`) for the container to exit; its exit code.
    pub async fn wait_exit(&self, within: Duration) -> i64 {
        let deadline = Instant::now() + within;
        while self.running().await {
            assert!(
                Instant::now() < deadline,
                "{} still running after {within:?}:\n{}",
                self.name,
                self.logs().await
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        self.state().await.exit_code.unwrap_or(-1)
    }

    /// SIGKILL, as a crashed node.
    pub async fn kill(&self) {
        let kill = KillContainerOptionsBuilder::new().signal("KILL").build();
        self.docker
            .kill_container(self.inner.id(), Some(kill))
            .await
            .unwrap_or_else(|e| panic!("killing {}: {e}", self.name));
    }

    /// SIGTERM, then SIGKILL after `grace` (`docker stop`).
    pub async fn stop(&self, grace: Duration) {
        let stop = StopContainerOptionsBuilder::new()
            .t(i32::try_from(grace.as_secs()).unwrap_or(i32::MAX))
            .build();
        self.docker
            .stop_container(self.inner.id(), Some(stop))
            .await
            .unwrap_or_else(|e| panic!("stopping {}: {e}", self.name));
    }
}
