import Glibc

/// What `extsandbox exec` was asked to do, however its arguments were parsed.
package struct ExecRequest: Equatable {
    package var policy = "standard"
    package var readOnlyBinds: [String] = []
    package var writableBinds: [String] = []
    package var environment: [String] = []
    /// `--chdir`; `nil`: the caller's directory if visible inside, else `/` (``StartingDirectory``).
    package var workingDirectory: String?
    package var audit = false
    /// Print the sandbox's lifecycle on stderr (launch with policy and pids, how it ended).
    package var verbose = false
    /// `--json-status-fd`: where to write how the program ended (``ExecStatus``).
    package var statusDescriptor: Int32?
    /// The program and its arguments (never empty).
    package var words: [String] = []

    package init(
        policy: String = "standard", readOnlyBinds: [String] = [], writableBinds: [String] = [], environment: [String] = [],
        workingDirectory: String? = nil, audit: Bool = false, verbose: Bool = false, statusDescriptor: Int32? = nil,
        words: [String] = []
    ) {
        (self.policy, self.readOnlyBinds, self.writableBinds, self.environment) = (policy, readOnlyBinds, writableBinds, environment)
        (self.workingDirectory, self.audit, self.verbose, self.statusDescriptor, self.words) =
            (workingDirectory, audit, verbose, statusDescriptor, words)
    }

    /// The common shapes of `exec` (long options, `--opt value` or `--opt=value`, then the
    /// program), parsed without ArgumentParser, whose reflection costs a cold process about
    /// 1.5 ms of a command that should take a few. Anything else returns `nil` and goes to
    /// ArgumentParser, which owns help, usage errors and their messages; a test checks that both
    /// parse every accepted shape the same way.
    package static func quickParse(_ arguments: ArraySlice<String>) -> ExecRequest? {
        var request = ExecRequest()
        var seen: Set<String> = []
        var index = arguments.startIndex
        while index < arguments.endIndex {
            let token = arguments[index]
            if token == "--" {
                index += 1
                break
            }
            guard token.hasPrefix("-") else { break }  // the program: the rest is its own
            guard token.hasPrefix("--") else { return nil }
            let name: Substring, inlineValue: Substring?
            if let equals = token.firstIndex(of: "=") {
                name = token[token.index(token.startIndex, offsetBy: 2)..<equals]
                inlineValue = token[token.index(after: equals)...]
            } else {
                name = token.dropFirst(2)
                inlineValue = nil
            }
            index += 1
            if name == "audit" || name == "verbose" {
                guard inlineValue == nil, seen.insert(String(name)).inserted else { return nil }
                if name == "audit" { request.audit = true } else { request.verbose = true }
                continue
            }
            let value: String
            if let inlineValue {
                value = String(inlineValue)
            } else {
                guard index < arguments.endIndex else { return nil }
                value = arguments[index]
                index += 1
            }
            // ArgumentParser would read a dash as the next option (or complain): let it.
            guard !value.isEmpty, !value.hasPrefix("-") else { return nil }
            switch name {
            case "json-status-fd":
                guard let number = Int32(value), seen.insert(String(name)).inserted else { return nil }
                request.statusDescriptor = number
            case "policy", "chdir":
                guard seen.insert(String(name)).inserted else { return nil }
                if name == "policy" { request.policy = value } else { request.workingDirectory = value }
            case "ro-bind": request.readOnlyBinds.append(value)
            case "bind": request.writableBinds.append(value)
            case "env": request.environment.append(value)
            default: return nil
            }
        }
        request.words = Array(arguments[index...])
        guard let program = request.words.first, program != "--help", program != "-h", request.validationError == nil else { return nil }
        return request
    }

    /// Why the request cannot run, in the words of a usage error.
    package var validationError: String? {
        if words.isEmpty { return "Missing the program to run." }
        for item in environment where !item.contains("=") || item.hasPrefix("=") {
            return "--env expects key=value, got '\(item)'."
        }
        if let descriptor = statusDescriptor, let problem = ExecStatus.descriptorProblem(descriptor) { return problem }
        return nil
    }
}
