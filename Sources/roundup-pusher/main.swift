import Foundation
import Logging
import RoundupCore
import RoundupPush

let configuration = RoundupConfiguration.loadOrExit()
RoundupLogging.bootstrap(level: configuration.logLevel, format: configuration.logFormat)
let registry = RoundupMetrics.bootstrap()
let logger = Logger(label: "roundup.pusher")
do {
    try await PusherApplication.run(configuration: configuration, registry: registry, logger: logger)
} catch let error as ConfigurationError {
    FileHandle.standardError.write(Data("\(error)\n".utf8))
    exit(78)  // EX_CONFIG
} catch {
    logger.critical("pusher failed", metadata: ["error": "\(error)"])
    exit(1)
}
