import CoreMetrics
public import Foundation
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

    /// Records, for each of `entryIDs`, the time from when it was added to its stream until `now` (one timer for all).
    public func record(since entryIDs: some Collection<String>, now: Date = Date()) {
        guard !entryIDs.isEmpty else { return }
        let timer = CoreMetrics.Timer(label: rawValue)
        for id in entryIDs {
            guard let added = StreamStats.milliseconds(ofID: id) else { continue }
            timer.recordNanoseconds(Int64(max(0, now.timeIntervalSince1970 * 1000 - added) * 1_000_000))
        }
    }
}

extension SimpleHTTPService {
    /// A background process's own endpoints: `/healthz` (alive), `/readyz` (`notReady` returns what is unreachable,
    /// or nil when all is well) and `/metrics`. A process that consumes streams lists those an operator paused in
    /// `/readyz` (`"paused": ["webhooks"]`) and stays ready: a pause is deliberate, and an orchestrator must neither
    /// restart the process nor take its pod (which may serve the API) out of service for it.
    public static func operations(
        name: String, host: String, port: Int, logger: Logger, registry: PrometheusCollectorRegistry, pauses: PauseWatcher? = nil,
        notReady: @escaping @Sendable () async -> String?
    ) -> SimpleHTTPService {
        SimpleHTTPService(name: name, host: host, port: port, logger: logger) { request in
            switch request.path {
            case "/healthz": return .json(.ok, #"{"status":"ok"}"#)
            case "/readyz":
                var body: [String: JSONValue] = [:]
                if let pauses { body["paused"] = .array(pauses.paused.map { .string($0.rawValue) }) }
                guard let problem = await notReady() else {
                    body["status"] = "ready"
                    return .json(.ok, JSONValue.object(body).canonicalJSON)
                }
                body["error"] = .object(["code": "unavailable", "message": .string(problem)])
                return .json(.serviceUnavailable, JSONValue.object(body).canonicalJSON)
            case "/metrics": return .text(.ok, RoundupMetrics.render(registry), contentType: "text/plain; version=0.0.4")
            default: return .json(.notFound, #"{"error":{"code":"not_found","message":"no such path"}}"#)
            }
        }
    }

    /// The same for a process that needs Redis and the store: ready when Redis answers a PING within a second and the
    /// store answers `storePing`.
    public static func operations(
        name: String, host: String, port: Int, logger: Logger, registry: PrometheusCollectorRegistry, redis: RedisClient,
        pauses: PauseWatcher? = nil, storePing: @escaping @Sendable () async throws -> Void
    ) -> SimpleHTTPService {
        operations(name: name, host: host, port: port, logger: logger, registry: registry, pauses: pauses) {
            if (try? await redis.send(RedisCommand("PING"), timeout: .seconds(1))) == nil { return "Redis is not reachable" }
            if (try? await storePing()) == nil { return "the store is not reachable" }
            return nil
        }
    }
}
