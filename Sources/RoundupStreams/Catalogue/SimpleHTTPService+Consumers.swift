public import Logging
import NIOCore
import NIOHTTP1
public import Prometheus
import RoundupCore
public import RoundupRedis
public import RoundupRuntime

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
