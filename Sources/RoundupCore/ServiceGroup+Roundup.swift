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
