import Foundation
import Hummingbird
public import Logging
import RoundupCore
import RoundupDatabase
import RoundupRedis
public import RoundupRuntime
import RoundupStore
import RoundupStreams
import ServiceLifecycle

extension Dashboard {
    /// Runs the dashboard on `host:port` until SIGTERM or SIGINT. Beyond loopback it needs `ROUNDUP_DASHBOARD_TOKEN`:
    /// the page can replay and delete.
    public static func run(configuration: RoundupConfiguration, host: String, port: Int, logger: Logger) async throws {
        let loopback = ["127.0.0.1", "::1", "localhost"].contains(host)
        if !loopback && configuration.dashboardToken == nil {
            throw ConfigurationError(
                key: "ROUNDUP_DASHBOARD_TOKEN", problem: "must be set to listen on \(host): only loopback is served without a password")
        }
        let store = try await Stores.make(configuration: configuration, logger: logger)
        let redis = try RedisClient.make(configuration: configuration, logger: logger)
        let history = DashboardHistory(redis: redis, keys: configuration.redisKeys, logger: logger)
        let dashboard = Dashboard(
            options: .init(
                keys: configuration.redisKeys, token: configuration.dashboardToken, viewerToken: configuration.dashboardViewerToken,
                basePath: configuration.dashboardBasePath, jobStaleSeconds: configuration.jobStaleSeconds),
            redis: redis, store: store, history: history)
        let app = Application(
            router: dashboard.router(), configuration: .init(address: .hostname(host, port: port), serverName: "roundup-dashboard"), logger: logger)
        logger.notice(
            "dashboard listening",
            metadata: [
                "url": "http://\(host):\(port)/", "base_path": "\(configuration.dashboardBasePath.isEmpty ? "/" : configuration.dashboardBasePath)",
                "password": "\(configuration.dashboardToken == nil ? "none" : "set")",
                "viewer_password": "\(configuration.dashboardViewerToken == nil ? "none" : "set")",
            ])
        try await RoundupServices.run(
            [.init(service: app), .init(service: history)], dependencies: store.service.map { [$0] } ?? [], configuration: configuration,
            logger: logger
        ) {
            await redis.shutdown()
        }
    }
}
