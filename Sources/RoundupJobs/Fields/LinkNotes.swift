import Foundation
public import RoundupCore

/// Links written into a card's description instead of kept as link attachments (a list's `move_links_to_notes`, and the
/// `migrate_links` job). A link goes in once: one the description holds already (`holds`) is not appended again, so a
/// job run twice, or resumed after a card's description was written but before its attachments were deleted, writes
/// nothing twice. What counts as held is exact: a URL inside a longer one (`…/issue/12` in `…/issue/123`) is not held,
/// and a named link is held only with its name.
public enum LinkNotes {
    /// The most characters Trello keeps in a card's description; a longer one is refused (`400 invalid value for desc`).
    public static let descriptionLimit = 16_384

    /// A description's length as Trello counts it against `descriptionLimit`: UTF-16 code units (a JavaScript string's
    /// length), never fewer than its characters, so a text this calls short enough is short enough.
    public static func length(_ text: String) -> Int { text.utf16.count }

    public struct Link: Sendable, Hashable {
        public var url: String
        /// Shown before the URL when it says something the URL does not (Trello names a link after its URL by default).
        public var name: String?

        public init(url: String, name: String? = nil) {
            self.url = url
            self.name = name
        }

        /// The name as written: its whitespace (line breaks too) collapsed to single spaces; nil when it is empty or
        /// the URL itself.
        var shownName: String? {
            guard let name else { return nil }
            let collapsed = name.split(whereSeparator: \.isWhitespace).joined(separator: " ")
            return collapsed.isEmpty || collapsed == url ? nil : collapsed
        }

        /// The link's line: `name: url`, or the URL alone.
        public var line: String { shownName.map { "\($0): \(url)" } ?? url }
    }

    /// Whether `text` holds `url` whole: on its own line, or with whitespace (or the text's start or end) on both sides.
    /// `https://x/issue/12` is not in `https://x/issue/123`, `(https://x/issue/12)` or `https://x/issue/12.`.
    public static func containsLink(_ url: String, in text: String) -> Bool {
        guard !url.isEmpty else { return false }
        var from = text.startIndex
        while let found = text[from...].range(of: url) {
            let before = found.lowerBound == text.startIndex ? nil : text[text.index(before: found.lowerBound)]
            let after = found.upperBound == text.endIndex ? nil : text[found.upperBound]
            if before?.isWhitespace ?? true, after?.isWhitespace ?? true { return true }
            from = text.index(after: found.lowerBound)
        }
        return false
    }

    /// Whether `text` holds `link`: a link without a name of its own when it holds the URL whole (`containsLink`); a
    /// named one when a line of it is the link's line (`name: url`, whitespace aside), so the name is not lost with the
    /// attachment.
    public static func holds(_ link: Link, in text: String) -> Bool {
        guard link.shownName != nil else { return containsLink(link.url, in: text) }
        guard containsLink(link.url, in: text) else { return false }
        let wanted = link.line
        return text.split(whereSeparator: \.isNewline).contains { line in
            line.split(whereSeparator: \.isWhitespace).joined(separator: " ") == wanted
        }
    }

    /// Where links went in a description: `notes`, the new text; `held`, the links it holds (already, or appended);
    /// `left`, those left out because appending them would make it longer than the limit.
    public struct Placement: Sendable, Equatable {
        public var notes: String
        public var held: [Link]
        public var left: [Link]
    }

    /// `notes` with a line for each link it does not hold yet, after a blank line (one link per line), as long as the
    /// text stays within `limit` (`length`): a link that would take it over is left out, and the next ones are still
    /// tried. Links without a URL are passed over. Nothing appended: `notes` as it was.
    public static func placing(_ links: [Link], in notes: String, limit: Int = descriptionLimit) -> Placement {
        var placement = Placement(notes: notes, held: [], left: [])
        let base = notes.replacingTrailingNewlines()
        var text = base
        var appended = false
        for link in links where !link.url.isEmpty {
            if holds(link, in: text) {
                placement.held.append(link)
                continue
            }
            let next = appended ? text + "\n" + link.line : (base.isEmpty ? link.line : base + "\n\n" + link.line)
            guard length(next) <= limit else {
                placement.left.append(link)
                continue
            }
            text = next
            appended = true
            placement.held.append(link)
        }
        if appended { placement.notes = text }
        return placement
    }

    /// `notes` with a line for each link it does not hold yet, after a blank line (one link per line), whatever its
    /// length (the caller checks it against `descriptionLimit`).
    public static func appending(_ links: [Link], to notes: String) -> String {
        placing(links, in: notes, limit: .max).notes
    }

    /// A card's link attachments (uploads are files, not links), in the card's order.
    public static func links(ofCard card: [String: JSONValue]) -> [(id: String, link: Link)] {
        (card["attachments"]?.arrayValue ?? []).compactMap { attachment in
            guard attachment["isUpload"]?.boolValue != true, let id = attachment["id"]?.stringValue, let url = attachment["url"]?.stringValue,
                !url.isEmpty
            else { return nil }
            return (id, Link(url: url, name: attachment["name"]?.stringValue))
        }
    }
}

extension String {
    fileprivate func replacingTrailingNewlines() -> String {
        var text = Substring(self)
        while let last = text.last, last.isNewline || last == " " { text = text.dropLast() }
        return String(text)
    }
}
