import Foundation
import NIOCore
import RoundupRedis
import RoundupRuntime
import RoundupStreams
import RoundupTesting
import Testing

@Suite(.serialized) struct RedisClientTests {
    @Test func repliesDecodeIntoEveryKind() async throws {
        let server = try await RedisServer()
        let client = RedisClient(configuration: try RedisConfiguration(url: server.url))
        #expect(try await client.send("PING") == .status("PONG"))
        #expect(try await client.send("SET", "k", "v") == .status("OK"))
        #expect(try await client.send("GET", "k") == .bulk(Array("v".utf8)))
        #expect(try await client.send("GET", "missing") == .null)
        #expect(try await client.send("INCRBY", "n", 41) == .integer(41))
        #expect(try await client.send("RPUSH", "l", "a", "b") == .integer(2))
        #expect(try await client.send("LRANGE", "l", 0, -1) == .array([.bulk(Array("a".utf8)), .bulk(Array("b".utf8))]))
        // Binary-safe values round-trip.
        let binary: [UInt8] = [0, 13, 10, 255, 36]
        _ = try await client.send(RedisCommand("SET", ["bin", RedisArgument(bytes: binary)]))
        #expect(try await client.send("GET", "bin").bytes == binary)
        // A server error says which command failed.
        await #expect {
            try await client.send("INCR", "k")
        } throws: { error in
            let e = error as? RedisClientError
            return e?.code == .server && e?.message.hasPrefix("INCR:") == true
        }
        await client.shutdown()
        await server.stop()
    }

    /// Redis's refusals are typed by the code their reply starts with, where the reply arrives: the callers switch over
    /// `replyCode` (a missing group, a group already there, a script not cached, Redis busy or loading) and never read the text.
    @Test func errorRepliesAreTypedByTheirCode() async throws {
        #expect(RedisErrorCode(reply: "NOGROUP No such key 'x' or consumer group 'g'") == .noGroup)
        #expect(RedisErrorCode(reply: "MOVED 3999 127.0.0.1:6381") == .moved && RedisErrorCode(reply: "ASK 3999 127.0.0.1:6381") == .ask)
        #expect(RedisErrorCode(reply: "NEWCODE something") == .other("NEWCODE") && RedisErrorCode(reply: "") == .other(""))
        for (reply, transient) in [
            ("BUSY Redis is busy running a script", true), ("LOADING Redis is loading the dataset in memory", true),
            ("TRYAGAIN Multiple keys request during rehashing of slot", true), ("BUSYGROUP Consumer Group name already exists", false),
            ("OOM command not allowed when used memory > 'maxmemory'.", false), ("ERR unknown command", false),
        ] {
            #expect(RedisClientError.reply(reply, answering: "XADD").isTransient == transient, "\(reply)")
        }

        let server = try await RedisServer()
        let client = RedisClient(configuration: try RedisConfiguration(url: server.url))
        _ = try await client.send("SET", "text", "v")
        await #expect {
            try await client.send("LPUSH", "text", "x")
        } throws: { ($0 as? RedisClientError)?.replyCode == .wrongType }
        await #expect {
            try await client.send("XREADGROUP", "GROUP", "nogroup", "c", "COUNT", 1, "STREAMS", "nostream", ">")
        } throws: { ($0 as? RedisClientError)?.isNoGroup == true }
        _ = try await client.send("XGROUP", "CREATE", "s", "g", "0", "MKSTREAM")
        await #expect {
            try await client.send("XGROUP", "CREATE", "s", "g", "0", "MKSTREAM")
        } throws: { ($0 as? RedisClientError)?.replyCode == .busyGroup && ($0 as? RedisClientError)?.isTransient == false }
        // A script Redis no longer has (SCRIPT FLUSH) is sent again whole: NOSCRIPT is recognised by its code.
        let script = RedisScript(name: "answer", source: "return 42")
        #expect(try await client.evaluate(script, keys: [], arguments: []) == .integer(42))
        _ = try await client.send("SCRIPT", "FLUSH")
        #expect(try await client.evaluate(script, keys: [], arguments: []) == .integer(42))
        await client.shutdown()
    }

    @Test func pipelineKeepsOrder() async throws {
        let server = try await RedisServer()
        let client = RedisClient(configuration: RedisConfiguration(port: server.port, poolSize: 2))
        let commands = (0..<500).map { _ in RedisCommand("INCR", ["counter"]) }
        let replies = try await client.pipeline(commands)
        #expect(replies == (1...500).map { RedisValue.integer($0) })
        // Many concurrent senders on few connections: each gets its own reply.
        try await withThrowingTaskGroup(of: Bool.self) { group in
            for i in 0..<200 {
                group.addTask { try await client.send("ECHO", RedisArgument("m\(i)")).string == "m\(i)" }
            }
            for try await ok in group { #expect(ok) }
        }
        await client.shutdown()
        await server.stop()
    }

    @Test func scriptsRunBySHAWithFallbackToEval() async throws {
        let server = try await RedisServer()
        let client = RedisClient(configuration: try RedisConfiguration(url: server.url))
        let script = RedisScript(name: "t", source: "return redis.call('INCRBY', KEYS[1], ARGV[1])")
        // Unknown to the server: EVALSHA says NOSCRIPT, the client falls back to EVAL (which caches it).
        #expect(try await client.evaluate(script, keys: ["s"], arguments: [5]) == .integer(5))
        #expect(try await client.send("SCRIPT", "EXISTS", RedisArgument(script.sha1)) == .array([.integer(1)]))
        #expect(try await client.evaluate(script, keys: ["s"], arguments: [2]) == .integer(7))
        _ = try await client.send("SCRIPT", "FLUSH")
        #expect(try await client.evaluate(script, keys: ["s"], arguments: [1]) == .integer(8))
        await client.shutdown()
        await server.stop()
    }

    @Test func reconnectsAfterRedisRestarts() async throws {
        let server = try await RedisServer()
        let client = RedisClient(
            configuration: RedisConfiguration(port: server.port, poolSize: 1, connectTimeout: .milliseconds(300), commandTimeout: .milliseconds(500)))
        #expect(try await client.send("PING") == .status("PONG"))
        await server.stop()
        await #expect {
            try await client.send("PING")
        } throws: { error in
            (error as? RedisClientError)?.isTransient == true
        }
        try await server.start()
        let back = await TestSupport.eventually(timeout: .seconds(10)) { (try? await client.send("PING")) == .status("PONG") }
        #expect(back)
        await client.shutdown()
        await server.stop()
    }

    @Test func authenticatesWithUserAndPassword() async throws {
        let server = try await RedisServer(extraArguments: ["--requirepass", "s3cret-pass", "--user", "app", "on", ">app-pass", "~*", "&*", "+@all"])
        let noAuth = RedisClient(configuration: RedisConfiguration(port: server.port))
        await #expect { try await noAuth.send("GET", "x") } throws: { error in
            ((error as? RedisClientError)?.message.contains("NOAUTH")) == true
        }
        let defaultUser = RedisClient(configuration: try RedisConfiguration(url: "redis://:s3cret-pass@127.0.0.1:\(server.port)/1"))
        #expect(try await defaultUser.send("SET", "x", "1") == .status("OK"))
        let named = RedisClient(configuration: try RedisConfiguration(url: "redis://app:app-pass@127.0.0.1:\(server.port)/1"))
        #expect(try await named.send("GET", "x") == .bulk(Array("1".utf8)))
        let wrong = RedisClient(configuration: try RedisConfiguration(url: "redis://app:nope@127.0.0.1:\(server.port)"))
        await #expect { try await wrong.send("PING") } throws: { error in
            let e = error as? RedisClientError
            return e?.code == .connectionFailed && e?.message.contains("nope") == false
        }
        for c in [noAuth, defaultUser, named, wrong] { await c.shutdown() }
        await server.stop()
    }

    @Test func talksTLSToRedissURLs() async throws {
        let dir = try TestSupport.temporaryDirectory("tls")
        try TestSupport.makeTestCertificates(in: dir, name: "roundup-test")
        let tlsPort = try TestSupport.freePort()
        let server = try await RedisServer(extraArguments: [
            "--tls-port", String(tlsPort), "--tls-cert-file", dir.appendingPathComponent("server.crt").path,
            "--tls-key-file", dir.appendingPathComponent("server.key").path, "--tls-ca-cert-file", dir.appendingPathComponent("ca.crt").path,
            "--tls-auth-clients", "no", "--requirepass", "tls-pass",
        ])
        var configuration = try RedisConfiguration(url: "rediss://:tls-pass@127.0.0.1:\(tlsPort)/0")
        configuration.caFile = dir.appendingPathComponent("ca.crt").path
        let client = RedisClient(configuration: configuration)
        #expect(try await client.send("SET", "over-tls", "yes") == .status("OK"))
        #expect(try await client.send("GET", "over-tls").string == "yes")
        // Without trusting the test CA, the handshake fails: the certificate really is checked.
        let untrusting = RedisClient(configuration: try RedisConfiguration(url: "rediss://:tls-pass@127.0.0.1:\(tlsPort)/0"))
        await #expect(throws: RedisClientError.self) { try await untrusting.send("PING") }
        await client.shutdown()
        await untrusting.shutdown()
        await server.stop()
    }

    /// Commands are encoded in one pass into reserved bytes: lengths of every digit count, empty and multi-byte
    /// arguments, bytes holding CRLF and a buffer's bytes must reach Redis exactly (a wrong length breaks the protocol).
    @Test func argumentsOfEveryShapeReachRedisExactly() async throws {
        let server = try await RedisServer()
        let client = RedisClient(configuration: try RedisConfiguration(url: server.url))
        var buffer = ByteBuffer()
        buffer.writeString(String(repeating: "x", count: 4_500))
        let samples: [(RedisArgument, [UInt8])] = [
            ("", []), ("é✓ü", Array("é✓ü".utf8)), ("123456789", Array("123456789".utf8)), ("0123456789", Array("0123456789".utf8)),
            (RedisArgument(bytes: [13, 10, 36, 42, 0]), [13, 10, 36, 42, 0]), (RedisArgument(buffer: buffer), Array(buffer.readableBytesView)),
            (RedisArgument(String(repeating: "y", count: 100)), Array(String(repeating: "y", count: 100).utf8)),
            (RedisArgument(-12), Array("-12".utf8)),
        ]
        let pushed = try await client.send(RedisCommand("RPUSH", [RedisArgument("list")] + samples.map(\.0)))
        #expect(pushed == .integer(samples.count))
        let stored = try await client.send("LRANGE", "list", 0, -1)
        #expect(stored == .array(samples.map { .bulk($0.1) }))
        await client.shutdown()
        await server.stop()
    }

    /// One timer per connection: a request with a shorter deadline queued behind a longer one still fails at its own
    /// deadline, and a timer that fires while nothing has expired sets itself again for what is still waiting.
    @Test func eachRequestFailsAtItsOwnDeadlineWithOneTimer() async throws {
        let server = try await RedisServer()
        let client = RedisClient(configuration: RedisConfiguration(port: server.port, poolSize: 1, commandTimeout: .seconds(30)))
        _ = try await client.send("PING")
        // A long request holds the connection (BLPOP blocks it); a short one behind it times out at its own deadline.
        let start = ContinuousClock.now
        let long = Task { try await client.send(RedisCommand("BLPOP", ["nothing", 20]), timeout: .seconds(20)) }
        try await Task.sleep(for: .milliseconds(50))
        await #expect { try await client.send(RedisCommand("PING"), timeout: .milliseconds(300)) } throws: { error in
            (error as? RedisClientError)?.code == .timeout
        }
        #expect(ContinuousClock.now - start < .seconds(3))
        // The connection is failed with it (the order of replies can no longer be trusted), the long request too.
        await #expect(throws: RedisClientError.self) { try await long.value }
        // A timer set for a request answered in time fires, finds nothing late, and waits for the next deadline.
        #expect(try await client.send(RedisCommand("PING"), timeout: .milliseconds(200)) == .status("PONG"))
        let second = ContinuousClock.now
        await #expect { try await client.send(RedisCommand("BLPOP", ["nothing", 20]), timeout: .milliseconds(600)) } throws: { error in
            (error as? RedisClientError)?.code == .timeout
        }
        let waited = ContinuousClock.now - second
        #expect(waited >= .milliseconds(550) && waited < .seconds(3), "\(waited)")
        #expect(try await client.send("PING") == .status("PONG"))
        await client.shutdown()
        await server.stop()
    }

    @Test func commandTimeoutFailsFast() async throws {
        let server = try await RedisServer()
        let client = RedisClient(configuration: RedisConfiguration(port: server.port, commandTimeout: .milliseconds(200)))
        let start = ContinuousClock.now
        await #expect { try await client.send("BLPOP", "nothing", 5) } throws: { error in
            (error as? RedisClientError)?.code == .timeout
        }
        #expect(ContinuousClock.now - start < .seconds(2))
        #expect(try await client.send("PING") == .status("PONG"))
        await client.shutdown()
        await server.stop()
    }
}

@Suite struct RedisKeysTests {
    /// The dedupe key of an action: in its account's webhook shard's slot, the first 16 bytes of the action id's SHA-256
    /// in lowercase hex, written without a string per byte. An account's shard is FNV-1a of its id modulo 64, the
    /// same in every release: a shard that moved would read an account's events out of order.
    @Test func seenActionKeysAreTheHashInHex() {
        let keys = RedisKeys(prefix: "p:")
        #expect(WebhookShard(account: "acct").index == 42)
        #expect(WebhookShard(account: "acct").tag == "{wh42}" && WebhookShard(index: 7).tag == "{wh07}")
        // SHA-256 test vectors (FIPS 180-2): "" and "abc".
        #expect(keys.seenAction(account: "acct", action: "") == "p:seen:{wh42}:acct:e3b0c44298fc1c149afbf4c8996fb924")
        #expect(keys.seenAction(account: "acct", action: "abc") == "p:seen:{wh42}:acct:ba7816bf8f01cfea414140de5dae2223")
        // The mark and its event share a slot.
        #expect(
            RedisHashSlot(key: keys.seenAction(account: "acct", action: "abc")) == RedisHashSlot(key: keys.webhookStream(WebhookShard(index: 42))))
        for action in ["5f0c0e1b2a3d4e5f60718293", "é😀", String(repeating: "z", count: 300)] {
            let hex = keys.seenAction(account: "acct", action: action).dropFirst("p:seen:{wh42}:acct:".count)
            #expect(hex.count == 32 && hex.allSatisfy { "0123456789abcdef".contains($0) })
        }
        #expect(keys.seenAction(account: "acct", action: "a") != keys.seenAction(account: "acct", action: "b"))
    }
}
