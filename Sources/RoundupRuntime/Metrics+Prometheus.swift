import CoreMetrics
public import Logging
import NIOCore
import NIOHTTP1
public import Prometheus
import RoundupCore
public import RoundupRedis

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

extension SimpleHTTPService {
    /// A background process's own endpoints: `/healthz` (alive), `/readyz` (`notReady` returns what is unreachable,
    /// or nil when all is well) and `/metrics`.
    public static func operations(
        name: String, host: String, port: Int, logger: Logger, registry: PrometheusCollectorRegistry,
        notReady: @escaping @Sendable () async -> String?
    ) -> SimpleHTTPService {
        SimpleHTTPService(name: name, host: host, port: port, logger: logger) { request in
            switch request.path {
            case "/healthz": return .json(.ok, #"{"status":"ok"}"#)
            case "/readyz":
                guard let problem = await notReady() else { return .json(.ok, #"{"status":"ready"}"#) }
                let body = JSONValue.object(["error": .object(["code": "unavailable", "message": .string(problem)])]).canonicalJSON
                return .json(.serviceUnavailable, body)
            case "/metrics": return .text(.ok, RoundupMetrics.render(registry), contentType: "text/plain; version=0.0.4")
            default: return .json(.notFound, #"{"error":{"code":"not_found","message":"no such path"}}"#)
            }
        }
    }

    /// The same for a process that needs Redis and the store: ready when Redis answers a PING within a second and the
    /// store answers `storePing`.
    public static func operations(
        name: String, host: String, port: Int, logger: Logger, registry: PrometheusCollectorRegistry, redis: RedisClient,
        storePing: @escaping @Sendable () async throws -> Void
    ) -> SimpleHTTPService {
        operations(name: name, host: host, port: port, logger: logger, registry: registry) {
            if (try? await redis.send(RedisCommand("PING"), timeout: .seconds(1))) == nil { return "Redis is not reachable" }
            if (try? await storePing()) == nil { return "the store is not reachable" }
            return nil
        }
    }
}
