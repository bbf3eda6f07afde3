import CoreMetrics
import Prometheus

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
