import Foundation
import RoundupCore
import Testing

@testable import RoundupStore

/// `sync_tasks.field_hashes` is written and read without a `JSONValue` tree: the bytes must stay those of the
/// canonical JSON the tree wrote, and reading must give what the JSON parser gives, for the text the worker writes and
/// for any other.
@Suite struct FieldStampsTests {
    /// What `encode` wrote before: the canonical JSON of the object of [hash, time] pairs.
    static func treeEncoded(_ stamps: [String: FieldStamps.Stamp]) -> String {
        JSONValue.object(stamps.mapValues { .array([.string($0.hash), .number($0.time)]) }).canonicalJSON
    }

    /// What `decodeStamps` read before: the parser's tree, members that are not a [hash, time] pair skipped.
    static func treeDecoded(_ text: String) -> [String: FieldStamps.Stamp] {
        guard case .object(let object)? = try? JSONParser.parse(Array(text.utf8)) else { return [:] }
        var stamps: [String: FieldStamps.Stamp] = [:]
        for (name, value) in object {
            guard let pair = value.arrayValue, pair.count == 2, let hash = pair[0].stringValue, case .number(let time) = pair[1] else { continue }
            stamps[name] = .init(hash: hash, time: time)
        }
        return stamps
    }

    @Test func writtenStampsAreTheCanonicalJSONAndReadBack() {
        var rng = SplitMix64(seed: 19)
        let names = ["title", "notes", "due_date", "completed", "labels", "_membership", "checklists", "priority", "url", "start_date"]
        let times: [Double] = [0, 1, -1, 1_795_641_585, 1_795_641_585.537_430_3, 1e15, 1e16 + 2, 0.1, 123.456e-7]
        for round in 0..<200 {
            var stamps: [String: FieldStamps.Stamp] = [:]
            for name in names where Bool.random(using: &rng) {
                let hash = round.isMultiple(of: 7) ? "present" : String(UInt64.random(in: 0...UInt64.max, using: &rng), radix: 16)
                stamps[name] = .init(hash: hash, time: times[Int.random(in: 0..<times.count, using: &rng)] + Double(round))
            }
            let text = FieldStamps.encode(stamps)
            #expect(text == Self.treeEncoded(stamps))
            #expect(FieldStamps.decodeStamps(text) == stamps, "\(text)")
        }
        // Names and hashes that need escapes: written as the tree wrote them, read back through the parser.
        let odd: [String: FieldStamps.Stamp] = ["a\"b": .init(hash: "h\\1", time: 2), "é\n": .init(hash: "\u{1}", time: 3.5)]
        #expect(FieldStamps.encode(odd) == Self.treeEncoded(odd))
        #expect(FieldStamps.decodeStamps(FieldStamps.encode(odd)) == odd)
    }

    @Test func anyOtherTextIsReadAsTheParserReadsIt() {
        let texts = [
            "", "{}", "[]", "null", "{", #"{"title":["h",1]"#, #"{"title":["h",1]}x"#, #" {"title":["h",1]}"#,
            #"{ "title" : [ "h" , 1 ] }"#, #"{"title":["h",1,2]}"#, #"{"title":["h"]}"#, #"{"title":[1,"h"]}"#,
            #"{"title":["h",1],"notes":"x"}"#, #"{"title":["h",1e3],"notes":["n",-2.5E-3]}"#, #"{"title":["h",nan]}"#,
            #"{"title":["h",0x10]}"#, #"{"title":["h",1],"title":["g",2]}"#, #"{"t\u0041":["h",1]}"#, #"{"title":["h",]}"#,
        ]
        for text in texts {
            #expect(FieldStamps.decodeStamps(text) == Self.treeDecoded(text), "\(text)")
        }
    }

    /// The old rule for a number (the integer below 10^15 of an integral value, Swift's shortest round-trip form of any
    /// other): `writeCanonical(number:)` writes a whole number of milliseconds without the formatter, byte for byte
    /// the same.
    @Test func numbersAreWrittenAsTheShortestFormWas() {
        func old(_ n: Double) -> String { n.rounded() == n && abs(n) < 1e15 ? String(Int64(n)) : String(n) }
        func written(_ n: Double) -> String {
            var out: [UInt8] = []
            JSONValue.writeCanonical(number: n, into: &out)
            return String(decoding: out, as: UTF8.self)
        }
        var rng = SplitMix64(seed: 44)
        var numbers: [Double] = [0, -0.0, 1, -1, 1.5, -1.5, 0.001, 0.999, 1.001, 999_999_999_999.999, 1e12, 1e12 + 0.5, 1e15 - 1, 1e15, 0.1, 1e-7]
        for _ in 0..<20_000 {
            let milliseconds = Int64.random(in: -1_000_000_000_000_000...1_000_000_000_000_000, using: &rng)
            numbers.append(Double(milliseconds) / 1000)  // a time to the millisecond, as Trello's dates make them
            numbers.append(Double(milliseconds) / 1000 + 978_307_200 - 978_307_200)  // and back from Foundation's reference date
            numbers.append(Double(Int64.random(in: 1...99_999, using: &rng)) / 100)
            numbers.append(Double.random(in: -2e12...2e12, using: &rng))
            numbers.append(Double(bitPattern: UInt64.random(in: 0...UInt64.max, using: &rng)))
        }
        for n in numbers where n.isFinite {
            #expect(written(n) == old(n), "\(n.bitPattern)")
        }
    }

    /// Stamps' times read back as Double(_:) reads them (the scanner's own reading of a millisecond time), for the
    /// times `encode` writes and for the digits it never writes.
    @Test func timesReadBackAsDoubleReadsThem() {
        var rng = SplitMix64(seed: 45)
        var texts = [
            "0", "-0", "1", "-1", "12.5", "0.001", "-0.001", "1795641585.537", "1795641585.5374303", "123456789012345", "1234567890123456",
            "12345678901234.5", "123456789012.345", "1.0", "1e3", "-2.5E-3", "007", "1.2345",
        ]
        for _ in 0..<5_000 {
            texts.append(String(Double(Int64.random(in: 0...4_000_000_000_000, using: &rng)) / 1000))
        }
        for text in texts {
            let stamps = FieldStamps.decodeStamps(#"{"title":["h",\#(text)]}"#)
            #expect(stamps["title"]?.time.bitPattern == Double(text)?.bitPattern, "\(text)")
        }
    }
}
