public import ArgumentParser
import Foundation
import Logging
import NIOCore
import RoundupCore
import RoundupDashboard
import RoundupJobs
import RoundupOps
import RoundupPush
import RoundupRedis
import RoundupRuntime
import RoundupStore
import RoundupStreams

/// The operators' command line. Reads the same environment as the servers.
/// Exit codes: 0 ok, 1 a check failed, 2 usage error.
@main
struct RoundupCtl: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "roundupctl",
        abstract: "Look at and mend a roundup-server deployment: queues, dead letters, accounts, routes.",
        subcommands: [
            Queues.self, Pending.self, Find.self, DLQ.self, Pause.self, Resume.self, Consumers.self, Jobs.self, Accounts.self, Lists.self,
            Reconcile.self,
            Routes.self, Migrate.self, Check.self, DashboardCommand.self,
        ])

    static func main() async {
        do {
            var command = try parseAsRoot()
            if var asyncCommand = command as? any AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
        } catch {
            let code = exitCode(for: error)
            if code == .validationFailure || code.rawValue == 64 {
                FileHandle.standardError.write(Data((fullMessage(for: error) + "\n").utf8))
                Foundation.exit(2)
            }
            exit(withError: error)
        }
    }
}

/// What every command needs: the configuration, a logger that stays quiet, Redis.
struct Context {
    let configuration: RoundupConfiguration
    let redis: RedisClient

    static func make() throws -> Context {
        let configuration: RoundupConfiguration
        do {
            configuration = try RoundupConfiguration()
        } catch {
            throw CleanExit.message("\(error)")
        }
        var logger = Logger(label: "roundupctl")
        logger.logLevel = .error
        return Context(configuration: configuration, redis: try RedisClient.make(configuration: configuration, logger: logger))
    }
}

/// JSON escapes C0; DEL and C1 are escaped too, so what a client stored cannot drive the operator's terminal.
func printJSON(_ value: JSONValue) { print(TerminalText.jsonSafe(value.canonicalJSON)) }

/// Stored text (names, errors) as a terminal may show it: escape sequences and controls removed (`TerminalText`).
func shown(_ text: String) -> String { TerminalText.printable(text) }

/// Streams are named as `queues` shows them: `webhooks`, `jobs`, `push`.
extension RoundupStream: ExpressibleByArgument {}

/// A count with what it counts, for commands whose answer is one number.
func report(_ key: String, _ count: Int, json: Bool, text: String) {
    if json { printJSON(.object([key: .number(Double(count))])) } else { print(text) }
}
