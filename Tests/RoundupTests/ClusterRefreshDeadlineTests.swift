import Foundation
import NIOCore
import NIOPosix
import RoundupRedis
import Testing

/// Learning a cluster's map keeps to the deadline of the command that needs it: each node used to
/// be given its own connect and command timeouts, so with several silent nodes a 400 ms command waited for seconds.
/// Seeds that accept connections and never answer (a node hung, or a port that swallows what is sent) need no cluster.
@Suite struct ClusterRefreshDeadlineTests {
    /// Listeners on loopback that accept every connection and never write a byte.
    final class SilentNodes: Sendable {
        let channels: [any Channel]
        var ports: [Int] { channels.compactMap { $0.localAddress?.port } }

        init(count: Int) async throws {
            var channels: [any Channel] = []
            for _ in 0..<count {
                let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                    .childChannelInitializer { $0.eventLoop.makeSucceededVoidFuture() }
                    .bind(host: "127.0.0.1", port: 0).get()
                channels.append(channel)
            }
            self.channels = channels
        }

        func stop() async {
            for channel in channels { try? await channel.close() }
        }
    }

    func client(_ nodes: SilentNodes) throws -> RedisClient {
        // The defaults: 1 s to connect and 2 s a command, per node.
        let url = "redis://" + nodes.ports.map { "127.0.0.1:\($0)" }.joined(separator: ",")
        return RedisClient(configuration: try RedisConfiguration(url: url, cluster: true))
    }

    @Test func aCommandWhoseMapCannotBeLearntFailsAtItsDeadline() async throws {
        let nodes = try await SilentNodes(count: 4)
        let client = try client(nodes)
        let start = ContinuousClock.now
        await #expect {
            _ = try await client.send(RedisCommand("GET", ["key"]), timeout: .milliseconds(400))
        } throws: { error in
            (error as? RedisClientError)?.code == .timeout
        }
        // Four nodes at 2 s each took 8 s; now the deadline (and a little slack), not a node's timeout.
        let took = ContinuousClock.now - start
        #expect(took < .milliseconds(800), "\(took)")
        await client.shutdown()
        await nodes.stop()
    }

    /// A command joining a map refresh under way waits for it only until its own deadline; the refresh goes on for the
    /// command that started it, which fails at its own.
    @Test func aCommandWaitsForARefreshUnderWayOnlyUntilItsDeadline() async throws {
        let nodes = try await SilentNodes(count: 4)
        let client = try client(nodes)
        let start = ContinuousClock.now
        let long = Task { try await client.send(RedisCommand("GET", ["key"]), timeout: .seconds(3)) }
        try await Task.sleep(for: .milliseconds(100))
        let joined = ContinuousClock.now
        await #expect {
            _ = try await client.send(RedisCommand("GET", ["other"]), timeout: .milliseconds(300))
        } throws: { error in
            (error as? RedisClientError)?.code == .timeout
        }
        let waited = ContinuousClock.now - joined
        #expect(waited < .milliseconds(600), "\(waited)")
        await #expect {
            _ = try await long.value
        } throws: { error in
            (error as? RedisClientError)?.code == .timeout
        }
        let took = ContinuousClock.now - start
        #expect(took >= .milliseconds(2_500) && took < .seconds(6), "\(took)")
        await client.shutdown()
        await nodes.stop()
    }
}
