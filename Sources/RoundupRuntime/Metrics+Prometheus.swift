import CoreMetrics
public import Prometheus

/// The process's Prometheus registry, behind swift-metrics. Executables call `bootstrap()` once;
/// libraries only use swift-metrics' `Counter`, `Gauge`, `Timer`.
public enum RoundupMetrics {
    public static func bootstrap() -> PrometheusCollectorRegistry {
        let registry = PrometheusCollectorRegistry()
        var factory = PrometheusMetricsFactory(registry: registry)
        factory.defaultDurationHistogramBuckets = [
            .microseconds(100), .microseconds(250), .microseconds(500), .milliseconds(1), .milliseconds(2),
            .milliseconds(5), .milliseconds(10), .milliseconds(25), .milliseconds(50), .milliseconds(100),
            .milliseconds(250), .milliseconds(500), .seconds(1), .seconds(2.5), .seconds(5), .seconds(10),
        ]
        // End-to-end latencies span a backlog, a paused stream, Trello's slowness: up to ten minutes.
        let latencyBuckets: [Duration] = [
            .milliseconds(5), .milliseconds(10), .milliseconds(25), .milliseconds(50), .milliseconds(100), .milliseconds(250),
            .milliseconds(500), .seconds(1), .seconds(2.5), .seconds(5), .seconds(10), .seconds(30), .seconds(60), .seconds(120),
            .seconds(300), .seconds(600),
        ]
        for label in RoundupLatency.allCases { factory.durationHistogramBuckets[label.rawValue] = latencyBuckets }
        MetricsSystem.bootstrap(factory)
        return registry
    }

    /// The text exposition of the registry.
    public static func render(_ registry: PrometheusCollectorRegistry) -> String {
        var bytes: [UInt8] = []
        registry.emit(into: &bytes)
        return String(decoding: bytes, as: UTF8.self)
    }
}

/// The end-to-end latency histograms, from the time a stream entry was added (its id's milliseconds).
public enum RoundupLatency: String, CaseIterable, Sendable {
    /// Worker: a webhook accepted by the ingress (its entry added) → its card's change applied to the store.
    case webhookToChange = "roundup_webhook_to_change_seconds"
    /// Pusher: a change written (its push request added to the push stream) → the push accepted by APNs.
    case changeToPush = "roundup_change_to_push_seconds"
}
