import ArgumentParser
import Foundation
import Logging
import RoundupCore
import RoundupDashboard
import RoundupOps
import RoundupRedis
import RoundupRuntime
import RoundupStore

struct DashboardCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "dashboard",
        abstract: "Serve the operators' web dashboard: streams, charts, dead letters, failing entries, jobs, pause and resume.",
        discussion: """
            Listens on 127.0.0.1:9180 by default; reach it with `ssh -L 9180:127.0.0.1:9180 host` or \
            `kubectl port-forward`. Any other address needs ROUNDUP_DASHBOARD_TOKEN (the password; any user name).
            """)
    @Option(help: "Address to listen on.") var host = "127.0.0.1"
    @Option(help: "Port to listen on.") var port = 9180
    func run() async throws {
        let configuration: RoundupConfiguration
        do {
            configuration = try RoundupConfiguration()
        } catch {
            throw CleanExit.message("\(error)")
        }
        RoundupLogging.bootstrap(level: configuration.logLevel, format: configuration.logFormat)
        try await Dashboard.run(configuration: configuration, host: host, port: port, logger: Logger(label: "roundup.dashboard"))
    }
}
