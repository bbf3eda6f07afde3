import Hummingbird
import NIOCore
import RoundupRedis
import RoundupStore

/// `/healthz`, `/readyz` and `/metrics`: for the orchestrator and Prometheus, without a token.
struct HealthRoutes {
    let store: any StoreMaintenance
    let redis: RedisClient
    let metricsText: @Sendable () -> String

    var collection: RouteCollection<APIRequestContext> {
        let routes = RouteCollection(context: APIRequestContext.self)
        routes.get("healthz") { _, _ in ServiceStatus(status: "ok") }
        routes.get("readyz") { _, _ in try await ready() }
        routes.get("metrics") { _, _ in
            Response(
                status: .ok, headers: [.contentType: "text/plain; version=0.0.4"],
                body: ResponseBody(byteBuffer: ByteBuffer(string: metricsText())))
        }
        return routes
    }

    /// Ready when the store and Redis answer.
    func ready() async throws -> ServiceStatus {
        do {
            try await store.ping()
        } catch {
            throw APIError.unavailable("the store is not reachable")
        }
        do {
            _ = try await redis.send(RedisCommand("PING"), timeout: .milliseconds(1000))
        } catch {
            throw APIError.unavailable("Redis is not reachable")
        }
        return ServiceStatus(status: "ready")
    }
}
