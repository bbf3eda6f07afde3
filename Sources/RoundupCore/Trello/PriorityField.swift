import Foundation

/// The board's "Priority" dropdown custom field: its id and its options in the board's order.
///
/// The apps get a card's option twice: `priority`, the option's text (lower case) for display, and `priority_level`,
/// EventKit's scale (0 none, 1 highest … 9 lowest). The rule from options to levels (`level(of:)`):
/// 1. The options are ranked. When every option's text is a word this rule knows (`rankWords`: "urgent", "high",
///    "medium", "low", "lowest" and their synonyms), by that word, highest first (equal words keep the board's order);
///    otherwise in the board's order, the first option being the highest.
/// 2. An option named "none" has level 0, like no option at all; it is left out of the ranking.
/// 3. The n ranked options spread over 1…9: the i-th (from 0) has level `1 + round(8·i/(n−1))` (one option: 1). Three
///    options are 1, 5 and 9, EventKit's high, medium and low.
/// A level written back picks the option of that level, else the nearest (a tie goes to the higher priority); 0 picks
/// the "none" option, or clears the field. A level sent back unchanged names the card's own option, so it never
/// changes it (the sync compares it with the card's level before writing anything).
public struct PriorityField: Sendable, Equatable {
    public struct Option: Sendable, Equatable {
        public var id: String
        public var text: String
        public init(id: String, text: String) {
            self.id = id
            self.text = text
        }
    }

    public var fieldID: String
    /// In the board's order (Trello's `pos`).
    public private(set) var ordered: [Option]
    /// Option id → level (`level(of:)`), worked out once.
    private var levels: [String: Int] = [:]

    public init(fieldID: String, ordered: [Option]) {
        self.fieldID = fieldID
        self.ordered = ordered
        self.levels = Self.levels(ordered)
    }

    /// Option id → option text.
    public var options: [String: String] { Dictionary(ordered.map { ($0.id, $0.text) }, uniquingKeysWith: { a, _ in a }) }

    public func option(id: String) -> Option? { ordered.first { $0.id == id } }

    /// The option whose text is `text`, case ignored.
    public func option(text: String) -> Option? {
        let wanted = text.lowercased()
        return ordered.first { $0.text.lowercased() == wanted }
    }

    /// The option's level on EventKit's scale (0 for none or an unknown id).
    public func level(of optionID: String) -> Int { levels[optionID] ?? 0 }

    /// The option a level asks for: nil clears the field (level 0 on a board without a "none" option).
    public func option(level: Int) -> Option? {
        if level <= 0 { return ordered.first { Self.isNone($0.text) } }
        var best: (option: Option, distance: Int, level: Int)?
        for option in ordered {
            guard let own = levels[option.id], own > 0 else { continue }
            let distance = abs(own - level)
            if best == nil || distance < best!.distance || (distance == best!.distance && own < best!.level) {
                best = (option, distance, own)
            }
        }
        return best?.option
    }

    /// Words the ranking knows, highest priority first.
    public static let rankWords: [[String]] = [
        ["highest", "critical", "urgent", "asap", "blocker", "top"],
        ["high", "important"],
        ["medium", "normal", "moderate", "mid"],
        ["low", "minor"],
        ["lowest", "trivial", "someday"],
    ]

    static func isNone(_ text: String) -> Bool { text.trimmingCharacters(in: .whitespaces).lowercased() == "none" }

    static func rank(_ text: String) -> Int? {
        let word = text.trimmingCharacters(in: .whitespaces).lowercased()
        return rankWords.firstIndex { $0.contains(word) }
    }

    static func levels(_ ordered: [Option]) -> [String: Int] {
        var ranked = ordered.filter { !isNone($0.text) }
        let ranks = ranked.map { rank($0.text) }
        if !ranks.contains(nil) {
            // Stable: equal words keep the board's order.
            ranked = zip(ranked, ranks).enumerated().sorted { ($0.element.1!, $0.offset) < ($1.element.1!, $1.offset) }.map(\.element.0)
        }
        var levels: [String: Int] = [:]
        for (index, option) in ranked.enumerated() {
            let level = ranked.count == 1 ? 1 : 1 + Int((8.0 * Double(index) / Double(ranked.count - 1)).rounded())
            if levels[option.id] == nil { levels[option.id] = level }
        }
        for option in ordered where isNone(option.text) { levels[option.id] = 0 }
        return levels
    }

    // MARK: Stored form

    /// The options as the store keeps them: `[{"id", "text"}]` in the board's order.
    public var storedOptions: String {
        JSONValue.array(ordered.map { .object(["id": .string($0.id), "text": .string($0.text)]) }).canonicalJSON
    }

    /// Options as stored: the array of `storedOptions`, or the object (option id → text) kept before the order was,
    /// read in the order of the ids (Trello makes them in the order the options were added).
    public init(fieldID: String, storedOptions text: String) {
        var options: [Option] = []
        switch try? JSONParser.parse(Array(text.utf8)) {
        case .array(let items)?:
            options = items.compactMap { item in
                guard let id = item["id"]?.stringValue, let text = item["text"]?.stringValue else { return nil }
                return Option(id: id, text: text)
            }
        case .object(let object)?:
            options = object.compactMap { id, value in value.stringValue.map { Option(id: id, text: $0) } }.sorted { $0.id < $1.id }
        default:
            break
        }
        self.init(fieldID: fieldID, ordered: options)
    }
}
