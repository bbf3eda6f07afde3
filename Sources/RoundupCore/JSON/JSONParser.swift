/// A strict, allocation-light JSON parser over bytes. The hot paths (the ingress's envelope check and the worker's
/// body decoding) use it instead of Foundation's `JSONDecoder`, which cost most of their time in profiles.
/// Nesting is limited, so hostile input cannot exhaust the stack.
public struct JSONParser: ~Copyable {
    public struct Error: Swift.Error, CustomStringConvertible, Equatable {
        public var offset: Int
        public var reason: String
        public var description: String { "invalid JSON at byte \(offset): \(reason)" }

        public init(offset: Int, reason: String) {
            self.offset = offset
            self.reason = reason
        }
    }

    private let bytes: UnsafeRawBufferPointer
    private var index = 0
    private var depth = 0
    private static let maxDepth = 256

    private init(_ bytes: UnsafeRawBufferPointer) { self.bytes = bytes }

    /// Parses a whole document, building only the members `selection` names (at any depth) and checking the rest
    /// without building it: a reader that needs a few fields of a large body does not pay for strings and tables it
    /// would throw away. The document is validated exactly as `parse` validates it.
    public static func parse(_ bytes: some Collection<UInt8>, selecting selection: JSONSelection) throws -> JSONValue {
        try withBytes(bytes) { raw in
            var parser = JSONParser(raw)
            let value = try parser.value(selecting: selection)
            try parser.end()
            return value
        }
    }

    /// Parses a whole document into a value.
    public static func parse(_ bytes: some Collection<UInt8>) throws -> JSONValue {
        try withBytes(bytes) { raw in
            var parser = JSONParser(raw)
            let value = try parser.value()
            try parser.end()
            return value
        }
    }

    /// The ids a webhook body is routed by, after checking the whole body is well-formed JSON.
    public struct Envelope: Sendable, Equatable {
        public var hasAction = false
        public var actionID: String?
        public var actionType: String?
        public var modelID: String?
        /// The ids of `action.data.card`, `list`, `listBefore`, `listAfter` and `board`, as they came (strings only;
        /// a member that is not an object or an `id` that is not a string is left out), for checking their shape.
        public var dataIDs: [String] = []

        public init(hasAction: Bool = false, actionID: String? = nil, actionType: String? = nil, modelID: String? = nil, dataIDs: [String] = []) {
            self.hasAction = hasAction
            self.actionID = actionID
            self.actionType = actionType
            self.modelID = modelID
            self.dataIDs = dataIDs
        }
    }

    public static func envelope(_ bytes: some Collection<UInt8>) throws -> Envelope {
        try withBytes(bytes) { raw in try envelope(raw) }
    }

    public static func envelope(_ raw: UnsafeRawBufferPointer) throws -> Envelope {
        do {  // (a scope for the parser)
            var parser = JSONParser(raw)
            var envelope = Envelope()
            parser.skipSpace()
            guard parser.peek() == UInt8(ascii: "{") else { throw parser.fail("a webhook body is a JSON object") }
            try parser.object { parser, key in
                switch key {
                case "action":
                    // Only an object is an action (`"action": null` or a string is as good as none).
                    guard parser.peek() == UInt8(ascii: "{") else {
                        try parser.skip()
                        return
                    }
                    envelope.hasAction = true
                    try parser.object { parser, key in
                        switch key {
                        case "id": envelope.actionID = try parser.stringOrSkip()
                        case "type": envelope.actionType = try parser.stringOrSkip()
                        case "data":
                            guard parser.peek() == UInt8(ascii: "{") else {
                                try parser.skip()
                                return
                            }
                            try parser.object { parser, key in
                                switch key {
                                case "card", "list", "listBefore", "listAfter", "board":
                                    guard parser.peek() == UInt8(ascii: "{") else {
                                        try parser.skip()
                                        return
                                    }
                                    try parser.object { parser, key in
                                        if key == "id", let id = try parser.stringOrSkip() { envelope.dataIDs.append(id) } else { try parser.skip() }
                                    }
                                default: try parser.skip()
                                }
                            }
                        default: try parser.skip()
                        }
                    }
                case "model":
                    guard parser.peek() == UInt8(ascii: "{") else {
                        try parser.skip()
                        return
                    }
                    try parser.object { parser, key in
                        if key == "id" { envelope.modelID = try parser.stringOrSkip() } else { try parser.skip() }
                    }
                default:
                    try parser.skip()
                }
            }
            try parser.end()
            return envelope
        }
    }

    private static func withBytes<R>(_ bytes: some Collection<UInt8>, _ body: (UnsafeRawBufferPointer) throws -> R) throws -> R {
        if let result = try bytes.withContiguousStorageIfAvailable({ try body(UnsafeRawBufferPointer($0)) }) { return result }
        return try Array(bytes).withUnsafeBytes(body)
    }

    // MARK: Grammar

    private func fail(_ reason: String) -> Error { Error(offset: index, reason: reason) }

    private func peek() -> UInt8? { index < bytes.count ? bytes[index] : nil }

    private mutating func skipSpace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x0A, 0x0D, 0x09: index += 1
            default: return
            }
        }
    }

    private mutating func end() throws {
        skipSpace()
        if index != bytes.count { throw fail("unexpected bytes after the value") }
    }

    private mutating func expect(_ byte: UInt8) throws {
        skipSpace()
        guard peek() == byte else { throw fail("expected '\(Character(UnicodeScalar(byte)))'") }
        index += 1
    }

    private mutating func value() throws -> JSONValue {
        skipSpace()
        guard let byte = peek() else { throw fail("unexpected end") }
        switch byte {
        case UInt8(ascii: "{"):
            return try objectValue(keeping: nil)
        case UInt8(ascii: "["):
            var array: [JSONValue] = []
            try self.array { parser in array.append(try parser.value()) }
            return .array(array)
        case UInt8(ascii: "\""): return .string(try string())
        case UInt8(ascii: "t"):
            try literal("true")
            return .bool(true)
        case UInt8(ascii: "f"):
            try literal("false")
            return .bool(false)
        case UInt8(ascii: "n"):
            try literal("null")
            return .null
        default: return .number(try number())
        }
    }

    private mutating func value(selecting selection: JSONSelection) throws -> JSONValue {
        skipSpace()
        guard case .members(let wanted) = selection, peek() == UInt8(ascii: "{") else { return try value() }
        return try objectValue(keeping: wanted)
    }

    /// An object, with every member or (`wanted`) only the members named, the others checked and skipped. Members are
    /// gathered first so the table is allocated once at its size: grown one insert at a time, it was rehashed at 1, 2,
    /// 4, 8... members (a worker's event builds dozens of such tables). A repeated key keeps its
    /// last value.
    private mutating func objectValue(keeping wanted: [String: JSONSelection]?) throws -> JSONValue {
        var members: [(String, JSONValue)] = []
        try object { parser, key in
            guard let wanted else { return members.append((key, try parser.value())) }
            if let inner = wanted[key] {
                members.append((key, try parser.value(selecting: inner)))
            } else {
                try parser.skip()
            }
        }
        var object = [String: JSONValue](minimumCapacity: members.count)
        for (key, value) in members { object[key] = value }
        return .object(object)
    }

    /// Checks a value without building it.
    private mutating func skip() throws {
        skipSpace()
        guard let byte = peek() else { throw fail("unexpected end") }
        switch byte {
        case UInt8(ascii: "{"): try object { parser, _ in try parser.skip() }
        case UInt8(ascii: "["): try array { parser in try parser.skip() }
        case UInt8(ascii: "\""): try skipString()
        case UInt8(ascii: "t"): try literal("true")
        case UInt8(ascii: "f"): try literal("false")
        case UInt8(ascii: "n"): try literal("null")
        default: _ = try number()
        }
    }

    private mutating func stringOrSkip() throws -> String? {
        skipSpace()
        if peek() == UInt8(ascii: "\"") { return try string() }
        try skip()
        return nil
    }

    private mutating func object(_ member: (inout JSONParser, String) throws -> Void) throws {
        try container(open: "{", close: "}", name: "object") { parser in
            parser.skipSpace()
            guard parser.peek() == UInt8(ascii: "\"") else { throw parser.fail("expected a string key") }
            let key = try parser.string()
            try parser.expect(UInt8(ascii: ":"))
            parser.skipSpace()
            try member(&parser, key)
        }
    }

    private mutating func array(_ element: (inout JSONParser) throws -> Void) throws {
        try container(open: "[", close: "]", name: "array", element)
    }

    /// An object's or an array's skeleton: `open`, elements separated by commas, `close`, within the nesting bound.
    private mutating func container(
        open: Unicode.Scalar, close: Unicode.Scalar, name: StaticString, _ element: (inout JSONParser) throws -> Void
    ) throws {
        try expect(UInt8(ascii: open))
        depth += 1
        guard depth <= Self.maxDepth else { throw fail("nested too deeply") }
        skipSpace()
        if peek() == UInt8(ascii: close) {
            index += 1
            depth -= 1
            return
        }
        while true {
            try element(&self)
            skipSpace()
            guard let byte = peek() else { throw fail("unterminated \(name)") }
            index += 1
            if byte == UInt8(ascii: close) { break }
            guard byte == UInt8(ascii: ",") else { throw fail("expected ',' or '\(close)'") }
        }
        depth -= 1
    }

    private mutating func literal(_ word: StaticString) throws {
        let count = word.utf8CodeUnitCount
        guard index + count <= bytes.count else { throw fail("unexpected end") }
        for i in 0..<count where bytes[index + i] != word.utf8Start[i] { throw fail("invalid literal") }
        index += count
    }

    private mutating func number() throws -> Double {
        let start = index
        if peek() == UInt8(ascii: "-") { index += 1 }
        guard let first = peek(), first >= 0x30, first <= 0x39 else { throw fail("invalid value") }
        index += 1
        if first != 0x30 { while let d = peek(), d >= 0x30, d <= 0x39 { index += 1 } }
        if peek() == UInt8(ascii: ".") {
            index += 1
            guard let d = peek(), d >= 0x30, d <= 0x39 else { throw fail("digit expected after '.'") }
            while let d = peek(), d >= 0x30, d <= 0x39 { index += 1 }
        }
        if peek() == UInt8(ascii: "e") || peek() == UInt8(ascii: "E") {
            index += 1
            if peek() == UInt8(ascii: "+") || peek() == UInt8(ascii: "-") { index += 1 }
            guard let d = peek(), d >= 0x30, d <= 0x39 else { throw fail("digit expected in exponent") }
            while let d = peek(), d >= 0x30, d <= 0x39 { index += 1 }
        }
        let text = String(decoding: UnsafeRawBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
        guard let value = Double(text) else { throw fail("invalid number") }
        return value
    }

    /// Bytes that end the fast scan through a string: the quote, the backslash and control characters.
    private static let stringStops: [Bool] = (0..<256).map { $0 < 0x20 || $0 == 0x22 || $0 == 0x5C }

    private mutating func skipString() throws {
        index += 1  // opening quote
        let count = bytes.count
        try Self.stringStops.withUnsafeBufferPointer { stops in
            while true {
                // Eight bytes at a time while none of them can end the scan: the bytes that end it are those a
                // writer escapes (`JSONStringEscaping.needsEscape`); the byte loop below then finds the exact place.
                while index &+ 8 <= count,
                    !JSONStringEscaping.needsEscape(UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: index, as: UInt64.self)))
                {
                    index &+= 8
                }
                while index < count, !stops[Int(bytes[index])] { index += 1 }
                guard index < count else { throw fail("unterminated string") }
                let byte = bytes[index]
                if byte == UInt8(ascii: "\"") {
                    index += 1
                    return
                }
                if byte < 0x20 { throw fail("control character in string") }
                // A backslash.
                index += 1
                guard let escaped = peek() else { throw fail("unterminated string") }
                if escaped == UInt8(ascii: "u") {
                    _ = try hex4(at: index + 1)
                    index += 5
                } else {
                    guard Self.simpleEscapes.contains(escaped) else { throw fail("invalid escape") }
                    index += 1
                }
            }
        }
    }

    private static let simpleEscapes: Set<UInt8> = Set("\"\\/bfnrt".utf8)

    private mutating func string() throws -> String {
        let start = index + 1
        try skipString()
        let end = index - 1
        let raw = UnsafeRawBufferPointer(rebasing: bytes[start..<end])
        // Fast path: no escapes.
        if !raw.contains(UInt8(ascii: "\\")) { return String(decoding: raw, as: UTF8.self) }
        var out: [UInt8] = []
        out.reserveCapacity(raw.count)
        var i = 0
        while i < raw.count {
            let byte = raw[i]
            guard byte == UInt8(ascii: "\\") else {
                out.append(byte)
                i += 1
                continue
            }
            let escaped = raw[i + 1]
            i += 2
            switch escaped {
            case UInt8(ascii: "b"): out.append(0x08)
            case UInt8(ascii: "f"): out.append(0x0C)
            case UInt8(ascii: "n"): out.append(0x0A)
            case UInt8(ascii: "r"): out.append(0x0D)
            case UInt8(ascii: "t"): out.append(0x09)
            case UInt8(ascii: "u"):
                var scalar = UInt32(try hex4(at: start + i))
                i += 4
                if (0xD800..<0xDC00).contains(scalar), i + 6 <= raw.count, raw[i] == UInt8(ascii: "\\"), raw[i + 1] == UInt8(ascii: "u") {
                    let low = UInt32(try hex4(at: start + i + 2))
                    if (0xDC00..<0xE000).contains(low) {
                        scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                        i += 6
                    }
                }
                out.append(contentsOf: String(Character(UnicodeScalar(scalar) ?? "\u{FFFD}")).utf8)
            default: out.append(escaped)
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    private func hex4(at position: Int) throws -> UInt16 {
        guard position + 4 <= bytes.count else { throw Error(offset: position, reason: "short \\u escape") }
        var value: UInt16 = 0
        for i in 0..<4 {
            let c = bytes[position + i]
            let digit: UInt8
            switch c {
            case 0x30...0x39: digit = c - 0x30
            case 0x41...0x46: digit = c - 0x41 + 10
            case 0x61...0x66: digit = c - 0x61 + 10
            default: throw Error(offset: position + i, reason: "invalid \\u escape")
            }
            value = value << 4 | UInt16(digit)
        }
        return value
    }
}

/// Which parts of a document `JSONParser.parse(_:selecting:)` builds.
public indirect enum JSONSelection: Sendable {
    /// The whole value.
    case everything
    /// Of an object, only these members, each with what to build of it; other values are built whole.
    case members([String: JSONSelection])
}
