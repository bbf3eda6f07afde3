import Foundation
import NIOCore
import RoundupRedis
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
