public import Logging
public import ServiceLifecycle
import UnixSignals

/// How every roundup process runs its services: one group, stopped by SIGTERM or SIGINT within
/// `ROUNDUP_SHUTDOWN_TIMEOUT`, then its clients closed — whether the group ended well or not.
///
/// `dependencies` (the PostgreSQL connection pool) run in the group from the start and stop last; `startUp` (migrating
/// the store, publishing routes) runs once they run, and only when it has succeeded do `services` start, in a group of
/// their own inside the process's group. A start-up that fails ends the process with its error.
public enum RoundupServices {
    public static func run(
        _ services: [ServiceGroupConfiguration.ServiceConfiguration], dependencies: [any Service] = [],
        startUp: (@Sendable () async throws -> Void)? = nil, configuration: RoundupConfiguration, logger: Logger,
        afterwards close: () async -> Void
    ) async throws {
        let shutdownTimeout = Duration.seconds(configuration.shutdownTimeoutSeconds)
        // The trace exporter (tracing on) starts first and stops last: a shutdown's spans are exported too.
        let dependencies = (RoundupTracing.service.map { [$0] } ?? []) + dependencies
        var top = services
        if !dependencies.isEmpty || startUp != nil {
            var inner = ServiceGroupConfiguration(services: services, logger: logger)
            inner.maximumGracefulShutdownDuration = shutdownTimeout
            let main = AfterStartUp(startUp: startUp ?? {}, services: ServiceGroup(configuration: inner))
            top =
                dependencies.map { .init(service: $0) } + [.essential(main)]
        }
        var groupConfiguration = ServiceGroupConfiguration(services: top, gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)
        groupConfiguration.maximumGracefulShutdownDuration = shutdownTimeout
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

extension ServiceGroupConfiguration.ServiceConfiguration {
    /// A service the process exists for (a stream consumer, the HTTP server): when it ends, however it ends, the
    /// process shuts down rather than run on without it.
    public static func essential(_ service: some Service) -> Self {
        .init(service: service, successTerminationBehavior: .gracefullyShutdownGroup, failureTerminationBehavior: .gracefullyShutdownGroup)
    }
}

/// The process's own services, started once its start-up work is done (a shutdown meanwhile cancels that work).
struct AfterStartUp: Service {
    let startUp: @Sendable () async throws -> Void
    let services: ServiceGroup

    func run() async throws {
        do {
            try await cancelWhenGracefulShutdown { try await startUp() }
        } catch {
            // SIGTERM during start-up (a migration waiting for its database) is a clean stop, not a failure.
            if Task.isShuttingDownGracefully { return }
            throw error
        }
        guard !Task.isShuttingDownGracefully else { return }
        try await services.run()
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
