import Foundation
public import NIOCore

/// Where and how to reach Redis, parsed from a URL:
/// `redis://[[user]:password@]host[:port][/db]`, or `rediss://` for TLS. A cluster's URL may name several seed nodes,
/// `redis://h1:7000,h2:7001,h3:7002` (its credentials and scheme apply to every node).
public struct RedisConfiguration: Sendable, Equatable {
    /// The node to connect to (a cluster's first seed).
    public var host: String
    public var port: Int
    /// Redis Cluster: learn the slot map from `seeds` and route each command to the primary serving its key.
    public var cluster: Bool
    /// The nodes a cluster client asks for the slot map first (every host of the URL); `host:port` alone otherwise.
    public var seeds: [RedisNodeAddress]
    public var database: Int
    public var username: String?
    public var password: String?
    public var tls: Bool
    /// A PEM file of CA certificates to trust for TLS, besides the system's.
    public var caFile: String?
    public var poolSize: Int
    public var connectTimeout: TimeAmount
    public var commandTimeout: TimeAmount

    public init(
        host: String = "127.0.0.1", port: Int = 6379, database: Int = 0, username: String? = nil,
        password: String? = nil, tls: Bool = false, caFile: String? = nil, poolSize: Int = 4,
        connectTimeout: TimeAmount = .milliseconds(1000), commandTimeout: TimeAmount = .milliseconds(2000),
        cluster: Bool = false, seeds: [RedisNodeAddress]? = nil
    ) {
        self.host = host
        self.port = port
        self.cluster = cluster
        self.seeds = seeds ?? [RedisNodeAddress(host: host, port: port)]
        self.database = database
        self.username = username
        self.password = password
        self.tls = tls
        self.caFile = caFile
        self.poolSize = poolSize
        self.connectTimeout = connectTimeout
        self.commandTimeout = commandTimeout
    }

    /// `cluster`: the URL is a cluster's (it may name several hosts; its database must be 0).
    public init(url string: String, cluster: Bool) throws {
        // URLComponents takes one host: parse the first, add the others as seeds.
        var hosts: [Substring] = []
        var first = string
        if let scheme = string.range(of: "://") {
            let rest = string[scheme.upperBound...]
            let authority = rest.prefix { $0 != "/" && $0 != "?" }
            let hostList = authority.lastIndex(of: "@").map { authority[authority.index(after: $0)...] } ?? authority
            hosts = hostList.split(separator: ",", omittingEmptySubsequences: false)
            if hosts.count > 1 {
                first = String(string[..<hostList.startIndex]) + hosts[0] + String(rest[authority.endIndex...])
            }
        }
        try self.init(url: first)
        self.cluster = cluster
        if hosts.count > 1 {
            guard cluster else {
                throw RedisClientError(.invalidURL, "several hosts name a cluster's seed nodes: set ROUNDUP_REDIS_CLUSTER=true")
            }
            self.seeds = try hosts.map { host in
                guard !host.isEmpty else { throw RedisClientError(.invalidURL, "an empty host in the list of seed nodes") }
                let parsed = try RedisConfiguration(url: "redis://" + host)
                return RedisNodeAddress(host: parsed.host, port: parsed.port)
            }
        }
        if cluster, database != 0 {
            throw RedisClientError(.invalidURL, "a Redis Cluster has database 0 only, not \(database)")
        }
    }

    public init(url string: String) throws {
        guard let components = URLComponents(string: string), let scheme = components.scheme?.lowercased() else {
            throw RedisClientError(.invalidURL, "not a URL (expected redis://host:port/db or rediss://…)")
        }
        switch scheme {
        case "redis": self.init(tls: false)
        case "rediss": self.init(tls: true)
        default: throw RedisClientError(.invalidURL, "scheme must be redis or rediss, not \(scheme)")
        }
        guard let host = components.host, !host.isEmpty else {
            throw RedisClientError(.invalidURL, "no host")
        }
        self.host = host.hasPrefix("[") ? String(host.dropFirst().dropLast()) : host
        self.port = components.port ?? 6379
        self.seeds = [RedisNodeAddress(host: self.host, port: self.port)]
        let path = components.path.trimmingCharacters(in: CharacterSet(charactersIn: "/"))
        if !path.isEmpty {
            guard let db = Int(path), db >= 0 else { throw RedisClientError(.invalidURL, "database must be a number, not \(path)") }
            self.database = db
        }
        if let user = components.user, !user.isEmpty { self.username = user.removingPercentEncoding ?? user }
        if let password = components.password, !password.isEmpty {
            self.password = password.removingPercentEncoding ?? password
        }
    }

    /// host:port, for messages. Never includes credentials.
    public var endpoint: String {
        let scheme = tls ? "rediss" : "redis"
        if cluster { return "\(scheme)://\(seeds.map(\.description).joined(separator: ",")) (cluster)" }
        return "\(scheme)://\(RedisNodeAddress(host: host, port: port))/\(database)"
    }

    /// This configuration for one node of a cluster.
    func node(_ address: RedisNodeAddress) -> RedisConfiguration {
        var node = self
        node.host = address.host
        node.port = address.port
        node.cluster = false
        node.seeds = [address]
        return node
    }
}
