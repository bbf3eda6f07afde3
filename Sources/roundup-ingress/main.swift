import Foundation
import Logging
import RoundupCore
import RoundupIngress

let configuration = RoundupConfiguration.loadOrExit()
RoundupLogging.bootstrap(level: configuration.logLevel, format: configuration.logFormat)
let registry = RoundupMetrics.bootstrap()
let logger = Logger(label: "roundup.ingress")
do {
    try await IngressApplication.run(configuration: configuration, registry: registry, logger: logger)
} catch {
    logger.critical("ingress failed", metadata: ["error": "\(error)"])
    exit(1)
}
