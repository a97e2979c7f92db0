//! `[http] listen`: `/metrics` (Prometheus text), `/healthz` (the process
//! and its relay loop are alive) and `/readyz` (streaming from the slot
//! with Kafka reachable; a standby is alive but not ready, and says so).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use tokio_util::sync::CancellationToken;

use super::Metrics;
use crate::error::{Code, Error};

/// Binds `listen` (so a taken port fails the start, not a later scrape) and
/// serves until `shutdown`.
pub async fn serve(
    listen: &str,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) -> Result<SocketAddr, Error> {
    let listener = tokio::net::TcpListener::bind(listen).await.map_err(|e| {
        Error::new(
            Code::HTTP_LISTEN_FAILED,
            format!("cannot listen on {listen} (http.listen): {e}"),
        )
    })?;
    let bound = listener
        .local_addr()
        .map_err(|e| Error::new(Code::HTTP_LISTEN_FAILED, format!("{listen}: {e}")))?;
    let app = Router::new()
        .route("/metrics", get(metrics_text))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(metrics);
    tokio::spawn(async move {
        let served = axum::serve(listener, app)
            .with_graceful_shutdown(async move { shutdown.cancelled().await })
            .await;
        if let Err(e) = served {
            tracing::error!(code = %Code::HTTP_LISTEN_FAILED, error = %e, "the HTTP endpoint stopped");
        }
    });
    tracing::info!(listen = %bound, "serving /metrics, /healthz and /readyz");
    Ok(bound)
}

async fn metrics_text(State(m): State<Arc<Metrics>>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, prometheus::TEXT_FORMAT)],
        m.render(),
    )
}

async fn healthz(State(m): State<Arc<Metrics>>) -> impl IntoResponse {
    if m.is_alive() {
        (StatusCode::OK, "alive\n".to_string())
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "not alive: the relay loop has ended\n".to_string(),
        )
    }
}

async fn readyz(State(m): State<Arc<Metrics>>) -> impl IntoResponse {
    let status = if m.is_ready() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, format!("{}\n", m.readiness()))
}
