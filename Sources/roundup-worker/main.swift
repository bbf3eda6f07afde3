import Foundation
import Logging
import RoundupCore
import RoundupWorker

let configuration = RoundupConfiguration.loadOrExit()
RoundupLogging.bootstrap(level: configuration.logLevel, format: configuration.logFormat)
let registry = RoundupMetrics.bootstrap()
let logger = Logger(label: "roundup.worker")
do {
    try await WorkerApplication.run(configuration: configuration, registry: registry, logger: logger)
} catch {
    logger.critical("worker failed", metadata: ["error": "\(error)"])
    exit(1)
}
