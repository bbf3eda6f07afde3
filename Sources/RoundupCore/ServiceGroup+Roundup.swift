import Logging
import ServiceLifecycle
import UnixSignals

/// How every roundup process runs its services: one group, stopped by SIGTERM or SIGINT within
/// `ROUNDUP_SHUTDOWN_TIMEOUT`, then its clients closed — whether the group ended well or not.
public enum RoundupServices {
    public static func run(
        _ services: [ServiceGroupConfiguration.ServiceConfiguration], configuration: RoundupConfiguration, logger: Logger,
        afterwards close: () async -> Void
    ) async throws {
        var groupConfiguration = ServiceGroupConfiguration(services: services, gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)
        groupConfiguration.maximumGracefulShutdownDuration = .seconds(configuration.shutdownTimeoutSeconds)
        let result: Result<Void, any Error>
        do {
            try await ServiceGroup(configuration: groupConfiguration).run()
            result = .success(())
        } catch {
            result = .failure(error)
        }
        await close()
        try result.get()
    }
}

/// A start-up chore as a service: runs `operation` until it succeeds, with backoff (200 ms doubling to 5 s), beside
/// the process's other services rather than before them; stops early on graceful shutdown.
public struct RetryingTask: Service {
    let name: String
    let logger: Logger
    let operation: @Sendable () async throws -> Void

    public init(name: String, logger: Logger, operation: @escaping @Sendable () async throws -> Void) {
        self.name = name
        self.logger = logger
        self.operation = operation
    }

    public func run() async throws {
        var delay = Duration.milliseconds(200)
        while !Task.isShuttingDownGracefully, !Task.isCancelled {
            do {
                try await operation()
                return
            } catch {
                logger.warning("start-up task failed, retrying", metadata: ["task": "\(name)", "error": "\(error)"])
                try? await Task.sleep(for: delay)
                delay = min(delay * 2, .seconds(5))
            }
        }
    }
}
