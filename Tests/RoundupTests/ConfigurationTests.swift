import Foundation
import Logging
import RoundupCore
import RoundupRedis
import RoundupRuntime
import RoundupTesting
import Testing

@Suite struct ConfigurationTests {
    @Test func defaults() throws {
        let c = try RoundupConfiguration(environment: [:])
        #expect(c.redisURL == "redis://127.0.0.1:6379/0")
        #expect(c.redisPrefix == "roundup:")
        #expect(c.sqlitePath == "data/roundup.sqlite")
        #expect(c.trelloAPIURL == "https://api.trello.com/1")
        #expect(c.host == "127.0.0.1")
        #expect(c.ingressPort == 8081)
        #expect(c.workerPort == 9101)
        #expect(c.logLevel == .info)
        #expect(c.publicURL == nil)
    }

    @Test func badKeysAreNamed() {
        let cases: [(String, String)] = [
            ("ROUNDUP_INGRESS_PORT", "eighty"), ("ROUNDUP_WORKER_PORT", "70000"), ("LOG_LEVEL", "loud"),
            ("ROUNDUP_REDIS_URL", "http://x"), ("ROUNDUP_PUBLIC_URL", "not a url"), ("ROUNDUP_DATABASE_URL", "mysql://x"),
            ("ROUNDUP_MAX_DELIVERIES", "0"), ("ROUNDUP_REDIS_CA_FILE", "/nonexistent/ca.pem"),
        ]
        for (key, value) in cases {
            #expect {
                try RoundupConfiguration(environment: [key: value])
            } throws: { error in
                (error as? ConfigurationError)?.key == key
            }
        }
    }

    @Test func publicURLLosesTrailingSlash() throws {
        let c = try RoundupConfiguration(environment: ["ROUNDUP_PUBLIC_URL": "https://roundup.example.com/"])
        #expect(c.publicURL == "https://roundup.example.com")
    }

    @Test func redisURLs() throws {
        let plain = try RedisConfiguration(url: "redis://127.0.0.1:6380/2")
        #expect(plain.host == "127.0.0.1" && plain.port == 6380 && plain.database == 2 && !plain.tls && plain.password == nil)
        let tls = try RedisConfiguration(url: "rediss://app:p%40ss@redis.example.com:6390")
        #expect(tls.tls && tls.username == "app" && tls.password == "p@ss" && tls.port == 6390 && tls.database == 0)
        let passwordOnly = try RedisConfiguration(url: "redis://:secret@localhost")
        #expect(passwordOnly.username == nil && passwordOnly.password == "secret" && passwordOnly.port == 6379)
        #expect(!tls.endpoint.contains("p@ss"))
        #expect(throws: RedisClientError.self) { try RedisConfiguration(url: "http://localhost") }
        #expect(throws: RedisClientError.self) { try RedisConfiguration(url: "redis://localhost/abc") }
    }

    /// `ROUNDUP_APNS_APPS_FILE`: each app's topic, team and key; a file that is wrong names itself.
    @Test func apnsAppsFileIsReadAndCheckedWhole() throws {
        let dir = try TestSupport.temporaryDirectory("apps")
        let key = dir.appendingPathComponent("AuthKey.p8")
        try "key".write(to: key, atomically: true, encoding: .utf8)
        func load(_ json: String, topic: String = "app.dailyroundup.ios") throws -> RoundupConfiguration {
            let file = dir.appendingPathComponent("apps-\(UUID().uuidString).json")
            try json.write(to: file, atomically: true, encoding: .utf8)
            return try RoundupConfiguration(environment: ["ROUNDUP_APNS_APPS_FILE": file.path, "ROUNDUP_APNS_TOPIC": topic])
        }
        let good = try load(#"[{"topic":"app.dailyroundup.macos","team_id":"TEAM000001","key_id":"KEY0000001","key_file":"\#(key.path)"}]"#)
        #expect(
            good.apnsApps == [
                APNsAppCredentials(topic: BundleID(rawValue: "app.dailyroundup.macos")!, teamID: "TEAM000001", keyID: "KEY0000001", keyFile: key.path)
            ])
        for (json, problem) in [
            ("{}", "JSON array"),
            (#"[{"topic":"app.dailyroundup.macos","key_id":"K","key_file":"\#(key.path)"}]"#, "has no team_id"),
            (#"[{"topic":"not a topic","team_id":"T","key_id":"K","key_file":"\#(key.path)"}]"#, "not a bundle id"),
            (#"[{"topic":"app.dailyroundup.ios","team_id":"T","key_id":"K","key_file":"\#(key.path)"}]"#, "twice"),
            (#"[{"topic":"app.dailyroundup.macos","team_id":"T","key_id":"K","key_file":"/nonexistent.p8"}]"#, "cannot be read"),
        ] {
            #expect {
                try load(json)
            } throws: { error in
                (error as? ConfigurationError).map { $0.key == "ROUNDUP_APNS_APPS_FILE" && $0.problem.contains(problem) } ?? false
            }
        }
        #expect(throws: ConfigurationError.self) { try RoundupConfiguration(environment: ["ROUNDUP_APNS_APPS_FILE": "/nonexistent.json"]) }
    }
}

/// docs/CONFIGURATION.md is the reference operators read: its table names every key the configuration reads, and no
/// other, so the two cannot drift apart.
@Suite struct ConfigurationReferenceTests {
    /// The keys `RoundupConfiguration` reads, from its source: every quoted `ROUNDUP_*` or `LOG_*` name in it.
    static func keysInSource() throws -> Set<String> {
        let url = TestSupport.sourceRoot.appending(path: "Sources/RoundupRuntime/Configuration.swift")
        return try names(in: String(contentsOf: url, encoding: .utf8), pattern: #/"((?:ROUNDUP|LOG)_[A-Z0-9_]+)"/#)
    }

    /// The keys the reference documents: the names in the first column of its table (`A` / `B` rows name two).
    static func keysInReference() throws -> Set<String> {
        let url = TestSupport.sourceRoot.appending(path: "docs/CONFIGURATION.md")
        let rows = try String(contentsOf: url, encoding: .utf8).split(separator: "\n").filter { $0.hasPrefix("| `") }
        let firstCells = rows.map { $0.dropFirst(2).prefix { $0 != "|" } }.joined(separator: "\n")
        return names(in: String(firstCells), pattern: #/`((?:ROUNDUP|LOG)_[A-Z0-9_]+)`/#)
    }

    static func names(in text: String, pattern: Regex<(Substring, Substring)>) -> Set<String> {
        Set(text.matches(of: pattern).map { String($0.output.1) })
    }

    @Test func theReferenceDocumentsEveryKeyTheCodeReadsAndNoOther() throws {
        let source = try Self.keysInSource()
        let reference = try Self.keysInReference()
        #expect(source.count > 60, "the source's keys were not found: \(source.sorted())")
        #expect(source.subtracting(reference).sorted() == [], "read by Configuration.swift, missing from docs/CONFIGURATION.md")
        #expect(reference.subtracting(source).sorted() == [], "in docs/CONFIGURATION.md, not read by Configuration.swift")
    }
}
