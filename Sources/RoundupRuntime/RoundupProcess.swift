import Foundation
public import Logging
public import Prometheus
import RoundupCore

/// How every roundup server executable starts and ends: its configuration read (a bad one exits 78, EX_CONFIG),
/// logging, metrics and traces (when `OTEL_*` configures them: `RoundupTracing`) set up, then `run` until the process is told to stop. A failure is logged as `failure` and
/// exits 1; with `configurationErrorsExit`, a `ConfigurationError` from `run` is written to standard error and exits 78
/// instead.
public enum RoundupProcess {
    public static func main(
        label: String, failure: Logger.Message, configurationErrorsExit: Bool = false,
        run: (RoundupConfiguration, PrometheusCollectorRegistry, Logger) async throws -> Void
    ) async -> Never {
        let configuration = RoundupConfiguration.loadOrExit()
        let tracing = RoundupTracing.isConfigured()
        RoundupLogging.bootstrap(
            level: configuration.logLevel, format: configuration.logFormat, metadataProvider: tracing ? RoundupTracing.loggingMetadataProvider : nil)
        let registry = RoundupMetrics.bootstrap()
        let logger = Logger(label: label)
        do {
            // Traces (OTEL_* variables): the exporter runs with the process's services (`RoundupServices.run`).
            try RoundupTracing.bootstrap(serviceName: URL(fileURLWithPath: CommandLine.arguments[0]).lastPathComponent, logger: logger)
            try await run(configuration, registry, logger)
            exit(0)
        } catch let error as ConfigurationError where configurationErrorsExit {
            FileHandle.standardError.write(Data("\(error)\n".utf8))
            exit(78)  // EX_CONFIG
        } catch {
            logger.critical(failure, metadata: ["error": "\(error)"])
            exit(1)
        }
    }
}
