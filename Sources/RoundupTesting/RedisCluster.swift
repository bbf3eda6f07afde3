public import Foundation
import Logging
public import NIOCore
import NIOPosix
public import RoundupRedis

/// A real Redis Cluster on loopback for one test or benchmark: `masters` primaries with `replicasPerMaster` replicas
/// each (`redis-server --cluster-enabled yes`, created with `redis-cli --cluster create`), each node with its own
/// directory and append-only file, so a replica promoted after its primary was killed keeps what it had received.
public final class RedisCluster: @unchecked Sendable {
    // @unchecked: `processes` changes only in start/crash/restart, which tests call from one task.
    public let ports: [Int]
    public let directory: URL
    public let nodeTimeout: Duration
    public let replicasPerMaster: Int
    private var processes: [Int: ManagedProcess] = [:]

    public init(masters: Int = 3, replicasPerMaster: Int = 1, nodeTimeout: Duration = .seconds(3)) async throws {
        self.directory = try TestSupport.temporaryDirectory("redis-cluster")
        self.nodeTimeout = nodeTimeout
        self.replicasPerMaster = replicasPerMaster
        var ports: [Int] = []
        while ports.count < masters * (1 + replicasPerMaster) {
            let port = try TestSupport.freePort()
            // The cluster bus listens on port + 10000, and must be free too.
            guard port + 10_000 < 65_536, !ports.contains(port), TestSupport.isFree(port: port + 10_000) else { continue }
            ports.append(port)
        }
        self.ports = ports
        for port in ports { try await start(port) }
        let create = try await Self.redisCLI(
            ["--cluster", "create"] + ports.map { "127.0.0.1:\($0)" } + ["--cluster-replicas", String(replicasPerMaster), "--cluster-yes"],
            in: directory, name: "create")
        guard create.status == 0 else { throw RedisClientError(.connectionFailed, "redis-cli --cluster create failed: \(create.output)") }
        try await waitUntilHealthy()
    }

    /// The seed URL the server's processes take with `ROUNDUP_REDIS_CLUSTER=true` (three of the nodes).
    public var url: String { "redis://" + ports.prefix(3).map { "127.0.0.1:\($0)" }.joined(separator: ",") }

    public func configuration(poolSize: Int = 2, commandTimeout: TimeAmount = .seconds(2)) throws -> RedisConfiguration {
        var configuration = try RedisConfiguration(url: url, cluster: true)
        configuration.poolSize = poolSize
        configuration.commandTimeout = commandTimeout
        return configuration
    }

    private func start(_ port: Int) async throws {
        let executable = ["/usr/bin/redis-server", "/usr/local/bin/redis-server"].first { FileManager.default.isExecutableFile(atPath: $0) }
        guard let executable else { throw RedisClientError(.connectionFailed, "redis-server is not installed") }
        let own = directory.appendingPathComponent(String(port))
        try FileManager.default.createDirectory(at: own, withIntermediateDirectories: true)
        let milliseconds = Int(nodeTimeout.components.seconds) * 1000 + Int(nodeTimeout.components.attoseconds / 1_000_000_000_000_000)
        processes[port] = try ManagedProcess(
            name: "redis-\(port)", executable: URL(fileURLWithPath: executable),
            arguments: [
                "--port", String(port), "--bind", "127.0.0.1", "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                "--cluster-node-timeout", String(milliseconds), "--repl-diskless-sync-delay", "0", "--appendonly", "yes", "--save", "", "--dir",
                own.path,
            ],
            logDirectory: own)
        let ready = await TestSupport.eventually(timeout: .seconds(10)) { (try? await self.send(port, "PING")) != nil }
        if !ready { throw RedisClientError(.connectionFailed, "redis-server \(port) did not start: \(processes[port]?.output ?? "")") }
    }

    /// One command to one node (not routed), its reply.
    @discardableResult
    public func send(_ port: Int, _ name: String, _ arguments: RedisArgument..., timeout: TimeAmount = .seconds(2)) async throws -> RedisValue {
        let client = RedisClient(
            configuration: RedisConfiguration(port: port, poolSize: 1, connectTimeout: .milliseconds(500)), logger: Self.quiet)
        defer { Task { await client.shutdown() } }
        return try await client.send(RedisCommand(name, arguments), timeout: timeout)
    }

    /// The nodes that run now.
    public var running: [Int] { ports.filter { processes[$0]?.isRunning == true } }

    /// The primary serving `slot`, as a running node sees it.
    public func primary(serving slot: RedisHashSlot) async throws -> Int {
        for port in running {
            guard let reply = try? await send(port, "CLUSTER", "SHARDS"),
                let topology = RedisClusterTopology(shardsReply: reply, host: "127.0.0.1"),
                let shard = topology.shard(serving: slot)
            else { continue }
            return shard.primary.port
        }
        throw RedisClientError(.connectionFailed, "no node describes slot \(slot)")
    }

    /// The harness's own connections log nothing: a node polled while it starts refuses them.
    private static let quiet: Logger = {
        var logger = Logger(label: "roundup.test.redis-cluster")
        logger.logLevel = .critical
        return logger
    }()

    /// Every running node says `cluster_state:ok`, every slot is served by a primary with all its replicas online, and
    /// `redis-cli --cluster check` agrees.
    public func waitUntilHealthy(timeout: Duration = .seconds(60)) async throws {
        let healthy = await TestSupport.eventually(timeout: timeout, interval: .milliseconds(200)) {
            for port in self.running {
                guard let info = try? await self.send(port, "CLUSTER", "INFO").string, info.contains("cluster_state:ok") else { return false }
                guard let shards = try? await self.send(port, "CLUSTER", "SHARDS"),
                    let topology = RedisClusterTopology(shardsReply: shards, host: "127.0.0.1"),
                    topology.coveredSlots == RedisHashSlot.count,
                    topology.shards.allSatisfy({ $0.replicas.count >= self.replicasPerMaster })
                else { return false }
            }
            guard let any = self.running.first,
                let check = try? await Self.redisCLI(["--cluster", "check", "127.0.0.1:\(any)"], in: self.directory, name: "check")
            else { return false }
            return check.status == 0 && check.output.contains("[OK] All 16384 slots covered") && !check.output.contains("[ERR]")
        }
        if !healthy { throw RedisClientError(.timeout, "the cluster did not become healthy within \(timeout)") }
    }

    /// SIGKILL, as a crash.
    public func crash(_ port: Int) async {
        processes[port]?.signal(SIGKILL)
        _ = await processes[port]?.wait(timeout: .seconds(10))
    }

    /// Sends `signal` to a node (SIGSTOP: it hangs, as a node whose machine stalls; SIGCONT: it goes on).
    public func signal(_ port: Int, _ signal: Int32) {
        processes[port]?.signal(signal)
    }

    /// Starts a node again (after `crash`), with its configuration and data.
    public func restart(_ port: Int) async throws {
        try await start(port)
    }

    /// Moves `slot` from its primary to `target`'s, with its keys, as `redis-cli --cluster reshard` does; `keysFirst`
    /// of them are moved before the pause (the slot is then half migrated: its other keys still on the source, where a
    /// command for a moved key is answered `ASK`).
    public func migrate(slot: RedisHashSlot, to target: Int, pause: Duration = .zero, keysFirst: Int? = nil) async throws {
        let source = try await primary(serving: slot)
        guard source != target else { return }
        let targetID = try await send(target, "CLUSTER", "MYID").string ?? ""
        let sourceID = try await send(source, "CLUSTER", "MYID").string ?? ""
        try await send(target, "CLUSTER", "SETSLOT", RedisArgument(slot.value), "IMPORTING", RedisArgument(sourceID))
        try await send(source, "CLUSTER", "SETSLOT", RedisArgument(slot.value), "MIGRATING", RedisArgument(targetID))
        if let keysFirst {
            try await moveKeys(slot: slot, from: source, to: target, count: keysFirst)
            if pause > .zero { try await Task.sleep(for: pause) }
        }
        try await moveKeys(slot: slot, from: source, to: target, count: nil)
        for port in [target, source] {
            try await send(port, "CLUSTER", "SETSLOT", RedisArgument(slot.value), "NODE", RedisArgument(targetID))
        }
        for port in running where port != target && port != source {
            _ = try? await send(port, "CLUSTER", "SETSLOT", RedisArgument(slot.value), "NODE", RedisArgument(targetID))
        }
    }

    /// Moves up to `count` keys of `slot` (all of them when nil) from `source` to `target` with MIGRATE.
    private func moveKeys(slot: RedisHashSlot, from source: Int, to target: Int, count: Int?) async throws {
        var moved = 0
        while count.map({ moved < $0 }) ?? true {
            let batch = min(100, count.map { $0 - moved } ?? 100)
            let keys = (try await send(source, "CLUSTER", "GETKEYSINSLOT", RedisArgument(slot.value), RedisArgument(batch)).array ?? [])
                .compactMap(\.bytes)
            if keys.isEmpty { return }
            let client = RedisClient(configuration: RedisConfiguration(port: source, poolSize: 1), logger: Self.quiet)
            defer { Task { await client.shutdown() } }
            _ = try await client.send(
                RedisCommand("MIGRATE", ["127.0.0.1", RedisArgument(target), "", "0", "5000", "KEYS"] + keys.map { RedisArgument(bytes: $0) }),
                timeout: .seconds(10))
            moved += keys.count
        }
    }

    public func stop() async {
        for process in processes.values { await process.stop(grace: .seconds(5)) }
        processes = [:]
    }

    deinit {
        for process in processes.values { process.signal(SIGKILL) }
    }

    /// Runs redis-cli with `arguments`; its exit status and output.
    static func redisCLI(_ arguments: [String], in directory: URL, name: String) async throws -> (status: Int32, output: String) {
        let executable = ["/usr/bin/redis-cli", "/usr/local/bin/redis-cli"].first { FileManager.default.isExecutableFile(atPath: $0) }
        guard let executable else { throw RedisClientError(.connectionFailed, "redis-cli is not installed") }
        let log = "cli-\(name)-\(UUID().uuidString.prefix(6))"
        let process = try ManagedProcess(name: log, executable: URL(fileURLWithPath: executable), arguments: arguments, logDirectory: directory)
        let status = await process.wait(timeout: .seconds(60)) ?? -1
        let output = process.output
        try? FileManager.default.removeItem(at: process.logFile)
        return (status, output)
    }
}

extension TestSupport {
    /// Whether nothing listens on loopback `port` now.
    public static func isFree(port: Int) -> Bool {
        guard let channel = try? ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton).bind(host: "127.0.0.1", port: port).wait() else {
            return false
        }
        try? channel.close().wait()
        return true
    }
}
