import Foundation
import NIOCore
import RoundupCore
import RoundupStore
import RoundupTesting
import Testing

@Suite struct JSONParserTests {
    @Test func parsesEveryKind() throws {
        let text = #" {"s":"a\"b\\c\u00e9\ud83d\ude00","n":-12.5e2,"i":42,"t":true,"f":false,"z":null,"a":[1,[],{}],"o":{"k":"v"}} "#
        let value = try JSONParser.parse(Array(text.utf8))
        #expect(value["s"] == .string("a\"b\\cé😀"))
        #expect(value["n"] == .number(-1250))
        #expect(value["i"] == .number(42))
        #expect(value["t"] == .bool(true) && value["f"] == .bool(false) && value["z"] == .null)
        #expect(value["a"] == .array([.number(1), .array([]), .object([:])]))
        #expect(value["o"]?["k"] == .string("v"))
        // A repeated key keeps its last value; objects of every size up to a few rehash points read back whole.
        #expect(try JSONParser.parse(Array(#"{"a":1,"b":2,"a":3}"#.utf8)) == .object(["a": .number(3), "b": .number(2)]))
        for size in [0, 1, 2, 3, 7, 8, 9, 17, 100] {
            let members = (0..<size).map { "\"k\($0)\":\($0)" }.joined(separator: ",")
            let object = try JSONParser.parse(Array("{\(members)}".utf8))
            #expect(object == .object(Dictionary(uniqueKeysWithValues: (0..<size).map { ("k\($0)", JSONValue.number(Double($0))) })))
        }
    }

    /// The changes page writes strings straight into its buffer; they must be the bytes canonicalJSON makes, and JSON
    /// that reads back as the same string.
    @Test func aStringWrittenIntoABufferIsItsCanonicalJSON() throws {
        let samples = [
            "", "plain", "a\"quote\"", "back\\slash", "line\nbreak\r\ttab", "\u{0}\u{1}\u{1f}\u{7f}", "é😀 ünïcödé",
            "\"\\\"", String(repeating: "long ", count: 500) + "\n", "ends with escape\u{8}",
        ]
        #expect(JSONValue.string("a\"\\\n\u{1}\t").canonicalJSON == #""a\"\\\n\u0001\t""#)
        for sample in samples {
            var buffer = ByteBuffer()
            buffer.writeJSONString(sample)
            let written = buffer.readString(length: buffer.readableBytes) ?? ""
            #expect(written == JSONValue.string(sample).canonicalJSON)
            #expect(try JSONParser.parse(Array(written.utf8)) == .string(sample))
            #expect(try JSONSerialization.jsonObject(with: Data(written.utf8), options: .fragmentsAllowed) as? String == sample)
            // The same bytes through the page's writer, in exactly the room its bound promises (no slack to hide behind).
            var exact = ByteBuffer()
            exact.writeJSON(bound: JSONByteWriter.jsonStringBound(sample)) { $0.writeJSONString(sample) }
            #expect(exact.readString(length: exact.readableBytes) == written)
        }
        let worst = String(repeating: "\u{1}", count: 40)
        var tight = ByteBuffer()
        tight.writeJSON(bound: JSONByteWriter.jsonStringBound(worst)) { $0.writeJSONString(worst) }
        #expect(tight.readableBytes == JSONByteWriter.jsonStringBound(worst), "every byte escaped fills the bound exactly")
    }

    /// The page's writer: literals, raw JSON text and integers (both ends of Int64), one after the other.
    @Test func theByteWriterWritesWhatItIsGiven() throws {
        let values: [Int64] = [0, 7, -1, 10, 1_234_567_890, Int64.max, Int64.min]
        var buffer = ByteBuffer()
        buffer.writeString("[")
        buffer.writeJSON(bound: 200 + values.count * JSONByteWriter.decimalBound) { w in
            for (index, value) in values.enumerated() {
                if index > 0 { w.write(",") }
                w.writeDecimal(value)
            }
            w.write(",")
            w.writeRaw(#"{"a":[1,"é"]}"#)
        }
        buffer.writeString("]")
        let text = buffer.readString(length: buffer.readableBytes) ?? ""
        #expect(text == "[" + values.map(String.init).joined(separator: ",") + #",{"a":[1,"é"]}]"#)
    }

    /// The escaping skips eight bytes at a time while none needs an escape: every ASCII byte at every place of a
    /// string, beside multi-byte characters, is escaped as a plain per-character escaper does it.
    @Test func everyByteThatNeedsAnEscapeIsFoundWhereverItIs() throws {
        func reference(_ text: String) -> String {
            var out = "\""
            for scalar in text.unicodeScalars {
                switch scalar {
                case "\"": out += "\\\""
                case "\\": out += "\\\\"
                case "\n": out += "\\n"
                case "\r": out += "\\r"
                case "\t": out += "\\t"
                case _ where scalar.value < 0x20: out += String(format: "\\u%04x", scalar.value)
                default: out.unicodeScalars.append(scalar)
                }
            }
            return out + "\""
        }
        for filler in ["a", "é", "😀"] {
            for length in [1, 7, 8, 9, 17, 24] {
                for place in 0..<length {
                    for value in 0..<0x80 {
                        var scalars = Array(repeating: Unicode.Scalar(filler)!, count: length)
                        scalars[place] = Unicode.Scalar(UInt8(value))
                        let text = String(String.UnicodeScalarView(scalars))
                        var buffer = ByteBuffer()
                        buffer.writeJSONString(text)
                        #expect(buffer.readString(length: buffer.readableBytes) == reference(text), "\(value) at \(place) of \(length) \(filler)")
                    }
                }
            }
        }
    }

    /// `bytes` lent as a cell: checked for UTF-8 as the standard library checks it, and written (as a JSON string and
    /// as raw JSON) as its `String` — repaired where it is not valid — is written.
    static func expectWrittenAsItsString(_ bytes: [UInt8], _ comment: Comment) {
        bytes.withUnsafeBufferPointer { pointer in
            let cell = UTF8Cell(pointer)
            let text = String(decoding: bytes, as: UTF8.self)
            #expect(cell.isValidUTF8 == (String(validating: bytes, as: UTF8.self) != nil), comment)
            #expect(cell.string == text, comment)
            var string = ByteBuffer()
            string.writeJSON(bound: JSONByteWriter.jsonStringBound(text)) { $0.writeJSONString(text) }
            var fromCell = ByteBuffer()
            fromCell.writeJSON(bound: JSONByteWriter.jsonStringBound(cell)) { $0.writeJSONString(cell) }
            #expect(fromCell == string, comment)
            var raw = ByteBuffer()
            raw.writeJSON(bound: JSONByteWriter.rawBound(cell)) { $0.writeRaw(cell) }
            #expect(raw.readString(length: raw.readableBytes) == text, comment)
        }
    }

    /// Stored text written from its bytes (`UTF8Cell`) is what its `String` gives, invalid UTF-8 included (repaired
    /// as `String(decoding:as:)` does), and fits the bounds.
    @Test func cellsAreWrittenAsTheirStringsWouldBe() throws {
        let invalid: [[UInt8]] = [
            [0xFF], [0x61, 0xC3, 0x28], [0xC0, 0xAF], [0xED, 0xA0, 0x80], [0xF0, 0x9F, 0x98], [0xF4, 0x90, 0x80, 0x80],
            Array("eight ok".utf8) + [0x80], Array("seven o".utf8) + [0xE2, 0x82], Array(repeating: 0xFF, count: 17),
        ]
        let valid: [[UInt8]] = ["", "plain", "12345678", "123456789", "é😀 ünïcödé", "a\"q\"\\\n\u{1}", String(repeating: "ü", count: 9)].map {
            Array($0.utf8)
        }
        for bytes in valid + invalid { Self.expectWrittenAsItsString(bytes, "\(bytes)") }
        // Every byte invalid fills the raw bound exactly: three bytes of U+FFFD each.
        let worst = [UInt8](repeating: 0xFF, count: 17)
        worst.withUnsafeBufferPointer { pointer in
            var raw = ByteBuffer()
            raw.writeJSON(bound: JSONByteWriter.rawBound(UTF8Cell(pointer))) { $0.writeRaw(UTF8Cell(pointer)) }
            #expect(raw.readableBytes == JSONByteWriter.rawBound(UTF8Cell(pointer)))
        }
    }

    /// The checks that skip words (ASCII 32 and 8 bytes at a time with an overlapping last word; the escaping's scan
    /// telling whether a check is needed at all) find one byte that is not ASCII wherever it is: each of a stray
    /// continuation byte, a lone lead byte, a valid "é" and an invalid 0xFF at every place of every length to 72, among
    /// ASCII that needs escapes and ASCII that does not, is checked and written as its `String` says.
    @Test func aByteAbove0x7FIsFoundWhereverItIs() throws {
        for filler in [UInt8(ascii: "a"), UInt8(ascii: "\"")] {
            for length in 0...72 {
                for place in 0..<max(length, 1) {
                    for odd: [UInt8] in [[0x80], [0xC3], [0xC3, 0xA9], [0xFF]] {
                        var bytes = [UInt8](repeating: filler, count: length)
                        if length > 0 { bytes.replaceSubrange(place..<place + 1, with: odd) }
                        Self.expectWrittenAsItsString(bytes, "\(odd) at \(place) of \(length)")
                    }
                }
            }
        }
    }

    /// Every real Trello body among the fixtures, and the actions captured alone.
    static func fixtureFiles() throws -> [URL] {
        let dir = TestSupport.fixturesDirectory
        let actions = dir.appendingPathComponent("action-only")
        return try [dir, actions].flatMap { folder in
            try FileManager.default.contentsOfDirectory(atPath: folder.path).filter { $0.hasSuffix(".json") }.map {
                folder.appendingPathComponent($0)
            }
        }
    }

    @Test func agreesWithFoundationOnEveryFixture() throws {
        let files = try Self.fixtureFiles()
        #expect(files.count > 40)
        for file in files {
            let data = try Data(contentsOf: file)
            #expect(try JSONParser.parse(Array(data)) == JSONDecoder().decode(JSONValue.self, from: data), "\(file.lastPathComponent)")
        }
    }

    /// Strings are scanned eight bytes at a time: a quote, a backslash or a control character at any place in a word
    /// (and a multi-byte character beside it) must still be found where it is.
    @Test func aStopAtEveryPlaceOfAWordIsFound() throws {
        for length in 0..<24 {
            for position in 0...length {
                let head = String(repeating: "a", count: position)
                let tail = String(repeating: "é", count: max(0, length - position) / 2)
                for (inner, expected) in [("\\\"", "\""), ("\\\\", "\\"), ("\\n", "\n"), ("\\u00e9", "é"), ("ü", "ü")] {
                    let text = "{\"k\":\"" + head + inner + tail + "\",\"n\":1}"
                    let value = try JSONParser.parse(Array(text.utf8))
                    #expect(value["k"] == .string(head + expected + tail), "\(text)")
                    #expect(value["n"] == .number(1))
                }
                // A raw control character or an unterminated string is refused wherever it falls.
                let control = Array(("\"" + head + "\u{1}" + tail + "\"").utf8)
                #expect(throws: JSONParser.Error.self, "control at \(position)") { try JSONParser.parse(control) }
                let open = Array(("\"" + head + tail).utf8)
                #expect(throws: JSONParser.Error.self, "unterminated \(length)") { try JSONParser.parse(open) }
            }
        }
    }

    /// The worker builds only the members of a webhook body it reads; every fixture must read the same as from the
    /// whole document, and a mistake in a skipped part must still be refused.
    @Test func aWebhookBodyReadsTheSameWhenOnlyItsFieldsAreBuilt() throws {
        let files = try Self.fixtureFiles()
        var withCards = 0
        for file in files {
            let bytes = Array(try Data(contentsOf: file))
            let whole = try TrelloWebhookBody(json: JSONParser.parse(bytes))
            #expect(try TrelloWebhookBody.decode(bytes) == whole, "\(file.lastPathComponent)")
            if whole.action.data?.card != nil { withCards += 1 }
        }
        #expect(withCards > 30)
        let selection = JSONSelection.members(["a": .members(["b": .everything]), "c": .everything])
        let text = #"{"a":{"b":[1,{"x":2}],"skip":{"deep":["s",null]}},"c":"kept","d":{"e":1},"a2":3}"#
        #expect(
            try JSONParser.parse(Array(text.utf8), selecting: selection)
                == .object(["a": .object(["b": .array([.number(1), .object(["x": .number(2)])])]), "c": .string("kept")]))
        for bad in [#"{"d":{"e":1,}}"#, #"{"a":{"skip":"\x"}}"#, #"{"a":{"skip":[1 2]}}"#, #"{"d":"\#u{1}"}"#, #"{"c":1} x"#] {
            #expect(throws: JSONParser.Error.self, "\(bad)") { try JSONParser.parse(Array(bad.utf8), selecting: selection) }
        }
    }

    @Test func rejectsMalformedInput() {
        let bad = [
            "", "{", "}", "[1,]", "{\"a\":}", "{\"a\" 1}", "{a:1}", "01", "1.", "-", "tru", "nul", "\"abc", "\"\\x\"",
            "\"\u{01}\"", "[1 2]", "{\"a\":1,}", "1 2", "\"\\u12G4\"", "<html>",
        ]
        for text in bad {
            #expect(throws: JSONParser.Error.self, "\(text)") { try JSONParser.parse(Array(text.utf8)) }
        }
    }

    @Test func deepNestingIsRefusedNotACrash() {
        let deep = String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000)
        #expect(throws: JSONParser.Error.self) { try JSONParser.parse(Array(deep.utf8)) }
        #expect(throws: JSONParser.Error.self) { try JSONParser.envelope(Array(("{\"x\":" + deep + "}").utf8)) }
    }

    @Test func envelopeFindsIdsAndChecksTheWholeBody() throws {
        let body = #"{"model":{"id":"L1","name":"x"},"action":{"data":{"id":"nested"},"id":"A1","type":"createCard"}}"#
        let envelope = try JSONParser.envelope(Array(body.utf8))
        #expect(envelope == JSONParser.Envelope(hasAction: true, actionID: "A1", actionType: "createCard", modelID: "L1"))
        #expect(try JSONParser.envelope(Array(#"{"model":{"id":"L1"}}"#.utf8)).hasAction == false)
        #expect(throws: JSONParser.Error.self) { try JSONParser.envelope(Array(#"{"action":{"id":"A1"}} trailing"#.utf8)) }
        #expect(throws: JSONParser.Error.self) { try JSONParser.envelope(Array(#"[{"action":{}}]"#.utf8)) }
    }

    @Test func fastTimestampsMatchTheFormatter() throws {
        for text in ["2023-01-27T12:34:56.789Z", "2026-11-22T00:00:00Z", "2000-02-29T23:59:59.5Z", "1999-12-31T23:59:59.001Z"] {
            let fast = try #require(RoundupStoreTimestamp.fast(text))
            let reference = try Date.ISO8601FormatStyle(includingFractionalSeconds: text.contains(".")).parse(text)
            #expect(abs(fast.timeIntervalSince1970 - reference.timeIntervalSince1970) < 0.0005, "\(text)")
        }
        #expect(RoundupStoreTimestamp.fast("2023-13-01T00:00:00Z") == nil)
        #expect(RoundupStoreTimestamp.fast("not a date") == nil)
        // A fraction too long to be a time (and to fit an Int) is refused, not a crash.
        #expect(RoundupStoreTimestamp.fast("2024-01-01T00:00:00." + String(repeating: "9", count: 40) + "Z") == nil)
    }
}

enum RoundupStoreTimestamp {
    static func fast(_ text: String) -> Date? { Timestamp.fastParse(text) }
}

@Suite struct JSONParserWhitespaceTests {
    @Test func envelopeToleratesWhitespaceEverywhere() throws {
        let body = " {\n \"action\" :\n {\t\"id\" : \"A9\" , \"type\" : \"updateCard\" } ,\r\n \"model\" : { \"id\" : \"M\" } } \n"
        let envelope = try JSONParser.envelope(Array(body.utf8))
        #expect(envelope == JSONParser.Envelope(hasAction: true, actionID: "A9", actionType: "updateCard", modelID: "M"))
    }
}
