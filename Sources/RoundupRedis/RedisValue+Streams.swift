extension RedisValue {
    /// A flat `[key, value, key, value…]` reply (XINFO, HGETALL) as a dictionary; non-string keys are skipped.
    public var fieldMap: [String: RedisValue] {
        var map: [String: RedisValue] = [:]
        let items = array ?? []
        var index = 0
        while index + 1 < items.count {
            if let key = items[index].string { map[key] = items[index + 1] }
            index += 2
        }
        return map
    }

    /// Stream entries from XRANGE/XCLAIM (`[[id, [field, value, …]], …]`); entries deleted meanwhile come back
    /// without fields and are kept with none.
    public var streamEntries: [(id: String, fields: [String: [UInt8]])] {
        (array ?? []).compactMap { item in
            guard let pair = item.array, pair.count == 2, let id = pair[0].string else { return nil }
            return (id, pair[1].fieldMap.compactMapValues(\.bytes))
        }
    }
}
