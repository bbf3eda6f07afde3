extension RedisCommand {
    /// Where the command must run in a cluster.
    enum Route: Equatable {
        /// On the primary serving this slot (every key the command names is in it, or Redis refuses with `CROSSSLOT`).
        case slot(RedisHashSlot)
        /// It names no key: any primary answers it for itself (`PING`, `INFO`, `SCRIPT LOAD`).
        case anyNode
    }

    /// The slot of the command's first key; a command about the server names none.
    var route: Route {
        guard let index = keyIndices.first, index < arguments.count else { return .anyNode }
        return .slot(arguments[index].hashSlot)
    }

    /// The slots of every key the command names (more than one: Redis Cluster refuses it with `CROSSSLOT`).
    public var slots: Set<RedisHashSlot> { Set(keyIndices.filter { $0 < arguments.count }.map { arguments[$0].hashSlot }) }

    /// The positions in `arguments` (the name at 0) of the keys the command names, for the commands this server sends.
    var keyIndices: [Int] {
        let count = arguments.count
        guard count > 1, let name = arguments[0].word?.uppercased() else { return [] }
        switch name {
        case "EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO", "FCALL", "FCALL_RO":
            guard count > 2, let keys = arguments[2].word.flatMap({ Int($0) }), keys > 0 else { return [] }
            return Array(3..<min(count, 3 + keys))
        case "XREAD", "XREADGROUP":
            guard let streams = arguments.firstIndex(where: { $0.word?.uppercased() == "STREAMS" }) else { return [] }
            let keys = (count - streams - 1) / 2
            return Array((streams + 1)..<(streams + 1 + keys))
        case "XINFO", "XGROUP", "OBJECT", "MEMORY":
            return count > 2 ? [2] : []
        case "MGET", "DEL", "UNLINK", "EXISTS", "TOUCH", "WATCH", "SINTER", "SUNION", "SDIFF", "PFCOUNT":
            return Array(1..<count)
        case "MSET", "MSETNX":
            return Array(stride(from: 1, to: count, by: 2))
        case "PING", "INFO", "CONFIG", "CLIENT", "SCAN", "SELECT", "AUTH", "HELLO", "CLUSTER", "ASKING", "READONLY", "READWRITE",
            "WAIT", "DBSIZE", "FLUSHALL", "FLUSHDB", "SCRIPT", "FUNCTION", "COMMAND", "DEBUG", "SHUTDOWN", "LATENCY", "SLOWLOG",
            "TIME", "ROLE", "REPLICAOF", "SLAVEOF", "FAILOVER", "MULTI", "EXEC", "DISCARD", "BGSAVE", "SAVE", "LASTSAVE", "ACL",
            "MONITOR", "ECHO", "QUIT", "RESET", "MIGRATE":
            return []
        default:
            return [1]
        }
    }
}
