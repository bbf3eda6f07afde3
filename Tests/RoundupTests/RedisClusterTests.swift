import Foundation
import NIOCore
import RoundupRedis
import RoundupTesting
import Testing

/// The cluster client's pieces without a server: slots, hash tags, redirects, seeds, which arguments are keys.
@Suite struct RedisClusterRulesTests {
    /// Redis Cluster's own vectors (its specification and `CLUSTER KEYSLOT`): CRC16-XMODEM of `123456789` is 0x31C3.
    @Test func slotsAreCRC16OfTheKeyOrItsTag() {
        #expect(RedisHashSlot(key: "123456789").value == 0x31C3 & 0x3FFF)
        #expect(RedisHashSlot(key: "somekey").value == 11058)
        #expect(RedisHashSlot(key: "foo{hash_tag}").value == 2515)
        #expect(RedisHashSlot(key: "hash_tag") == RedisHashSlot(key: "foo{hash_tag}"))
        #expect(RedisHashSlot(key: "{user1000}.following") == RedisHashSlot(key: "{user1000}.followers"))
        // The first `{` and the next `}`: an empty tag, or none closed, hashes the whole key.
        #expect(RedisHashSlot(key: "foo{}{bar}") != RedisHashSlot(key: "bar"))
        #expect(RedisHashSlot(key: "foo{}{bar}") == RedisHashSlot(key: Array("foo{}{bar}".utf8)))
        #expect(RedisHashSlot(key: "foo{{bar}}zap") == RedisHashSlot(key: "{bar"))
        #expect(RedisHashSlot(key: "foo{bar}{zap}") == RedisHashSlot(key: "bar"))
        #expect(RedisHashSlot(key: "foo{bar") == RedisHashSlot(key: Array("foo{bar".utf8)))
    }

    @Test func redirectsNameTheSlotAndTheNode() {
        #expect(
            RedisRedirect(reply: "MOVED 3999 127.0.0.1:6381", host: "10.0.0.1")
                == RedisRedirect(kind: .moved, slot: 3999, host: "127.0.0.1", port: 6381))
        // An empty host is the node that answered.
        #expect(RedisRedirect(reply: "ASK 12 :7002", host: "10.0.0.1") == RedisRedirect(kind: .ask, slot: 12, host: "10.0.0.1", port: 7002))
        #expect(RedisRedirect(reply: "MOVED 1 ::1:7000", host: "x")?.address == RedisNodeAddress(host: "::1", port: 7000))
        #expect(RedisRedirect(reply: "MOVED 16384 h:1", host: "x") == nil)
        #expect(RedisRedirect(reply: "TRYAGAIN Multiple keys request during rehashing of slot", host: "x") == nil)
    }

    @Test func aClusterURLNamesItsSeeds() throws {
        let configuration = try RedisConfiguration(url: "redis://app:p%40ss@h1:7000,h2:7001,[::1]:7002,h4", cluster: true)
        #expect(configuration.cluster)
        #expect(configuration.host == "h1" && configuration.port == 7000)
        #expect(configuration.username == "app" && configuration.password == "p@ss")
        #expect(
            configuration.seeds == [
                RedisNodeAddress(host: "h1", port: 7000), RedisNodeAddress(host: "h2", port: 7001), RedisNodeAddress(host: "::1", port: 7002),
                RedisNodeAddress(host: "h4", port: 6379),
            ])
        #expect(!configuration.endpoint.contains("p@ss") && !configuration.endpoint.contains("p%40ss"))
        let single = try RedisConfiguration(url: "rediss://h1:7000", cluster: true)
        #expect(single.tls && single.seeds == [RedisNodeAddress(host: "h1", port: 7000)])
        // Several hosts without cluster mode, an empty one, a database other than 0: refused, saying why.
        #expect(throws: RedisClientError.self) { try RedisConfiguration(url: "redis://h1:7000,h2:7001", cluster: false) }
        #expect(throws: RedisClientError.self) { try RedisConfiguration(url: "redis://h1:7000,,h2:7001", cluster: true) }
        #expect(throws: RedisClientError.self) { try RedisConfiguration(url: "redis://h1:7000,h2:7001/2", cluster: true) }
        #expect(try RedisConfiguration(url: "redis://h1:7000/2", cluster: false).database == 2)
    }

    @Test func commandsRouteByTheirKeys() {
        func slots(_ arguments: RedisArgument...) -> [Int] {
            RedisCommand(nameAndArguments: arguments).slots.map(\.value).sorted()
        }
        #expect(slots("GET", "somekey") == [11058])
        #expect(slots("EVALSHA", "abc", "2", "{t}a", "{t}b", "arg") == [RedisHashSlot(key: "t").value])
        #expect(slots("EVALSHA", "abc", "0", "arg").isEmpty)
        #expect(slots("XREADGROUP", "GROUP", "g", "c", "COUNT", "1", "STREAMS", "somekey", "{hash_tag}", ">", ">") == [2515, 11058])
        #expect(slots("XINFO", "GROUPS", "somekey") == [11058])
        #expect(slots("MGET", "somekey", "foo{hash_tag}") == [2515, 11058])
        #expect(slots("PING").isEmpty && slots("INFO", "memory").isEmpty)
    }
}

/// The cluster client against a real Redis Cluster of three primaries and three replicas on loopback.
@Suite(.serialized) struct RedisClusterTests {
    /// Keys of every primary, in one pipeline and one by one; scripts loaded on each node that runs them; a script
    /// naming keys of two slots refused with a typed `CROSSSLOT`.
    @Test func everyKeyGoesToThePrimaryServingIt() async throws {
        let cluster = try await RedisCluster()
        let client = RedisClient(configuration: try cluster.configuration())
        let keys = (0..<300).map { "key:\($0)" }
        let written = try await client.pipeline(keys.map { RedisCommand("SET", [RedisArgument($0), RedisArgument("value of \($0)")]) })
        #expect(written.allSatisfy { $0 == .status("OK") })
        let read = try await client.pipeline(keys.map { RedisCommand("GET", [RedisArgument($0)]) })
        #expect(read.map(\.string) == keys.map { "value of \($0)" })
        #expect(try await client.send("GET", "key:7").string == "value of key:7")
        // Each key lives on the primary its slot names, and nowhere else.
        let topology = try #require(try await client.clusterTopology())
        #expect(topology.coveredSlots == RedisHashSlot.count && topology.shards.count == 3)
        #expect(topology.shards.allSatisfy { $0.replicas.count == 1 })
        for key in keys.prefix(30) {
            let owner = try await cluster.primary(serving: RedisHashSlot(key: key))
            #expect(try await cluster.send(owner, "GET", RedisArgument(key)).string == "value of \(key)")
        }
        let sizes = try await client.onEveryPrimary(RedisCommand("DBSIZE"))
        #expect(sizes.count == 3 && sizes.compactMap(\.reply.int).reduce(0, +) == keys.count)
        #expect(sizes.allSatisfy { ($0.reply.int ?? 0) > 0 })

        // A script on every primary (each loads it on its first NOSCRIPT), its keys sharing a tag.
        let script = RedisScript(
            name: "append", source: "redis.call('SET', KEYS[2], redis.call('GET', KEYS[1]) .. ARGV[1]) return redis.call('GET', KEYS[2])")
        for tag in ["a", "b", "c", "d", "e", "f"] {
            _ = try await client.send("SET", RedisArgument("{\(tag)}in"), "x")
            let reply = try await client.evaluate(script, keys: [RedisArgument("{\(tag)}in"), RedisArgument("{\(tag)}out")], arguments: ["y"])
            #expect(reply.string == "xy")
        }
        await #expect {
            _ = try await client.evaluate(script, keys: ["{a}in", "{b}out"], arguments: ["y"])
        } throws: { error in
            (error as? RedisClientError)?.replyCode == .crossSlot
        }
        await client.shutdown()
        await cluster.stop()
    }

    /// A slot moved while the client works: keys already on the new primary are answered `ASK` (followed with
    /// `ASKING`), the rest still on the old one; once moved, `MOVED` teaches the client the new owner.
    @Test func aSlotMovedLiveIsFollowed() async throws {
        let cluster = try await RedisCluster()
        let client = RedisClient(configuration: try cluster.configuration())
        let slot = RedisHashSlot(key: "moving")
        let keys = (0..<200).map { "{moving}:\($0)" }
        _ = try await client.pipeline(keys.map { RedisCommand("SET", [RedisArgument($0), RedisArgument($0)]) })
        let source = try await cluster.primary(serving: slot)
        let target = try #require(try await client.clusterTopology()?.shards.map(\.primary.port).first { $0 != source })

        let migration = Task { try await cluster.migrate(slot: slot, to: target, pause: .seconds(2), keysFirst: 100) }
        // While half the keys have moved: every read and write still lands.
        try await Task.sleep(for: .milliseconds(600))
        var halfway = 0
        for key in keys {
            if try await client.send("GET", RedisArgument(key)).string == key { halfway += 1 }
        }
        #expect(halfway == keys.count)
        let onTarget = try await cluster.send(target, "CLUSTER", "COUNTKEYSINSLOT", RedisArgument(slot.value)).int ?? 0
        #expect(onTarget > 0 && onTarget < keys.count, "the reads ran while the slot was half migrated")
        try await migration.value

        let pipelined = try await client.pipeline(keys.map { RedisCommand("GET", [RedisArgument($0)]) })
        #expect(pipelined.map(\.string) == keys)
        _ = try await client.send("SET", "{moving}:new", "after")
        #expect(try await cluster.send(target, "GET", "{moving}:new").string == "after")
        #expect(try await client.clusterTopology(refresh: true)?.shard(serving: slot)?.primary.port == target)
        await client.shutdown()
        await cluster.stop()
    }

    /// A primary killed: its replica takes over, the client learns the new map by itself and serves its slots again;
    /// a blocking read opens on the node serving its stream.
    @Test func aFailoverIsLearnt() async throws {
        let cluster = try await RedisCluster()
        let client = RedisClient(configuration: try cluster.configuration(commandTimeout: .milliseconds(500)))
        let slot = RedisHashSlot(key: "failing")
        _ = try await client.send("SET", "{failing}:k", "before")
        let victim = try await cluster.primary(serving: slot)
        let replica = try #require(try await client.clusterTopology()?.shard(serving: slot)?.replicas.first?.port)
        // The replica has the write before the primary dies.
        _ = try await client.send(RedisCommand("WAIT", ["1", "2000"]))
        #expect(try await cluster.send(replica, "READONLY") == .status("OK"))
        await cluster.crash(victim)

        let started = ContinuousClock.now
        let served = await TestSupport.eventually(timeout: .seconds(30), interval: .milliseconds(100)) {
            (try? await client.send("SET", "{failing}:k2", "after")) != nil
        }
        #expect(served, "the slots of the killed primary are served again")
        #expect(ContinuousClock.now - started < .seconds(30))
        #expect(try await client.send("GET", "{failing}:k").string == "before")
        #expect(try await client.clusterTopology(refresh: true)?.shard(serving: slot)?.primary.port == replica)

        // A blocking read on a stream of that slot, on a connection of its own to its new primary.
        _ = try await client.send("XADD", "{failing}:stream", "*", "f", "v")
        let reader = try await client.dedicatedConnection(for: "{failing}:stream").get()
        let entries = try await reader.send(RedisCommand("XREAD", ["BLOCK", "100", "STREAMS", "{failing}:stream", "0"])).get()
        #expect(entries.array?.count == 1)
        try await reader.close().get()

        // The old primary comes back as a replica; the cluster is whole again.
        try await cluster.restart(victim)
        try await cluster.waitUntilHealthy()
        // (A healthy cluster may list the restarted node among the shard's replicas a moment later: asked until it does.)
        let rejoined = await TestSupport.eventually(timeout: .seconds(20), interval: .milliseconds(200)) {
            (try? await client.clusterTopology(refresh: true)?.shard(serving: slot)?.replicas.map(\.port).contains(victim)) == true
        }
        #expect(rejoined, "the old primary is a replica of its shard again")
        await client.shutdown()
        await cluster.stop()
    }
}

extension RedisRedirect {
    fileprivate init(kind: Kind, slot: Int, host: String, port: Int) {
        self = RedisRedirect(reply: "\(kind == .moved ? "MOVED" : "ASK") \(slot) \(host):\(port)", host: host)!
    }
}
