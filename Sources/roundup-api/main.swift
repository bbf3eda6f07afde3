import Foundation
import Logging
import RoundupAPI
import RoundupCore

let configuration = RoundupConfiguration.loadOrExit()
RoundupLogging.bootstrap(level: configuration.logLevel, format: configuration.logFormat)
let registry = RoundupMetrics.bootstrap()
let logger = Logger(label: "roundup.api")
do {
    try await APIApplication.run(configuration: configuration, registry: registry, logger: logger)
} catch {
    logger.critical("api failed", metadata: ["error": "\(error)"])
    exit(1)
}
