/// A Redis node's address as the cluster names it.
public struct RedisNodeAddress: Sendable, Hashable, CustomStringConvertible {
    public var host: String
    public var port: Int

    public init(host: String, port: Int) {
        self.host = host
        self.port = port
    }

    /// `host:port`, or `[v6]:port`.
    public var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }
}

/// Which primary serves each slot, and its replicas: the cluster's map as one node described it (`CLUSTER SHARDS`, or
/// `CLUSTER SLOTS` on a Redis older than 7).
public struct RedisClusterTopology: Sendable, Equatable {
    public struct Shard: Sendable, Equatable {
        public var primary: RedisNodeAddress
        /// Replicas the describing node took for healthy (`online`).
        public var replicas: [RedisNodeAddress]
        public var slots: [ClosedRange<Int>]

        public init(primary: RedisNodeAddress, replicas: [RedisNodeAddress], slots: [ClosedRange<Int>]) {
            self.primary = primary
            self.replicas = replicas
            self.slots = slots
        }
    }

    public var shards: [Shard]

    public init(shards: [Shard]) {
        self.shards = shards.filter { !$0.slots.isEmpty }.sorted { ($0.slots.first?.lowerBound ?? 0) < ($1.slots.first?.lowerBound ?? 0) }
    }

    /// How many slots some primary serves (16,384 when the cluster covers them all).
    public var coveredSlots: Int { shards.reduce(0) { $0 + $1.slots.reduce(0) { $0 + $1.count } } }

    /// The shard serving `slot`, if any.
    public func shard(serving slot: RedisHashSlot) -> Shard? {
        shards.first { $0.slots.contains { $0.contains(slot.value) } }
    }

    /// `CLUSTER SHARDS`' reply: per shard a map of `slots` (start, end, start, end, …) and `nodes` (maps of `ip`,
    /// `endpoint`, `port`, `role`, `health`). `host` is the address the reply came from (a node that names its endpoint
    /// `?` or empty means that one). Nil for a reply of another shape.
    public init?(shardsReply reply: RedisValue, host: String) {
        guard let items = reply.array else { return nil }
        var shards: [Shard] = []
        for item in items {
            let shard = item.fieldMap
            guard let bounds = shard["slots"]?.array?.compactMap(\.int), bounds.count % 2 == 0, let nodes = shard["nodes"]?.array else { return nil }
            var primary: RedisNodeAddress?
            var replicas: [RedisNodeAddress] = []
            for node in nodes {
                let fields = node.fieldMap
                guard let port = fields["port"]?.int ?? fields["tls-port"]?.int else { continue }
                let named = [fields["endpoint"]?.string, fields["ip"]?.string].compactMap { $0 }.first { !$0.isEmpty && $0 != "?" }
                let address = RedisNodeAddress(host: named ?? host, port: port)
                let healthy = fields["health"]?.string.map { $0 == "online" } ?? true
                switch fields["role"]?.string {
                case "master": primary = address
                case "replica" where healthy: replicas.append(address)
                default: break
                }
            }
            guard let primary else { continue }
            let ranges = stride(from: 0, to: bounds.count, by: 2).compactMap { index -> ClosedRange<Int>? in
                let (low, high) = (bounds[index], bounds[index + 1])
                return low <= high && low >= 0 && high < RedisHashSlot.count ? low...high : nil
            }
            shards.append(Shard(primary: primary, replicas: replicas, slots: ranges))
        }
        self.init(shards: Self.merged(shards))
    }

    /// `CLUSTER SLOTS`' reply: `[start, end, [ip, port, id], [replica ip, port, id], …]` per range.
    public init?(slotsReply reply: RedisValue, host: String) {
        guard let ranges = reply.array else { return nil }
        var shards: [Shard] = []
        for range in ranges {
            guard let fields = range.array, fields.count >= 3, let low = fields[0].int, let high = fields[1].int, low <= high else { return nil }
            let nodes = fields.dropFirst(2).compactMap { node -> RedisNodeAddress? in
                guard let parts = node.array, parts.count >= 2, let port = parts[1].int else { return nil }
                let ip = parts[0].string.flatMap { $0.isEmpty || $0 == "?" ? nil : $0 }
                return RedisNodeAddress(host: ip ?? host, port: port)
            }
            guard let primary = nodes.first else { return nil }
            shards.append(Shard(primary: primary, replicas: Array(nodes.dropFirst()), slots: [low...high]))
        }
        self.init(shards: Self.merged(shards))
    }

    /// One shard per primary, its ranges in order.
    private static func merged(_ shards: [Shard]) -> [Shard] {
        var byPrimary: [RedisNodeAddress: Shard] = [:]
        var order: [RedisNodeAddress] = []
        for shard in shards {
            if var known = byPrimary[shard.primary] {
                known.slots += shard.slots
                known.replicas = Array(Set(known.replicas + shard.replicas)).sorted { $0.description < $1.description }
                byPrimary[shard.primary] = known
            } else {
                byPrimary[shard.primary] = shard
                order.append(shard.primary)
            }
        }
        return order.compactMap { byPrimary[$0] }.map { shard in
            var shard = shard
            shard.slots.sort { $0.lowerBound < $1.lowerBound }
            return shard
        }
    }
}

/// A `MOVED` or `ASK` reply: the slot and the node to ask instead.
public struct RedisRedirect: Sendable, Equatable {
    public enum Kind: Sendable, Equatable {
        /// The slot lives on `address` now: remember it.
        case moved
        /// The slot is migrating and this key is already on `address`: ask there once, with `ASKING`.
        case ask
    }

    public var kind: Kind
    public var slot: RedisHashSlot
    public var address: RedisNodeAddress

    /// `MOVED 3999 127.0.0.1:6381` or `ASK 3999 :6381` (an empty host is the node that answered, `host`).
    public init?(reply: String, host: String) {
        let words = reply.split(separator: " ")
        guard words.count == 3, let slot = Int(words[1]), (0..<RedisHashSlot.count).contains(slot) else { return nil }
        switch words[0] {
        case "MOVED": kind = .moved
        case "ASK": kind = .ask
        default: return nil
        }
        let target = words[2]
        guard let colon = target.lastIndex(of: ":"), let port = Int(target[target.index(after: colon)...]) else { return nil }
        var named = String(target[..<colon])
        if named.hasPrefix("["), named.hasSuffix("]") { named = String(named.dropFirst().dropLast()) }
        self.slot = RedisHashSlot(slot)
        self.address = RedisNodeAddress(host: named.isEmpty ? host : named, port: port)
    }
}
