import * as gcp from "@pulumi/gcp";
import * as pulumi from "@pulumi/pulumi";

/** Arguments of {@link ProjectBudget}. */
export interface ProjectBudgetArgs {
  readonly project: string;
  readonly billingAccount: string;
  /** Whole units of `currency` a month. */
  readonly monthlyAmount: number;
  readonly currency: string;
  /** Fractions of the amount (0.5 = 50 %) at which the billing account's admins get an alert. */
  readonly thresholds: readonly number[];
}

/**
 * A monthly budget for the platform's project: an e-mail alert to the billing account's admins at each
 * threshold of actual spend, and one at 100 % of the forecast. A budget only alerts; it stops nothing.
 */
export class ProjectBudget extends pulumi.ComponentResource {
  public readonly budget: gcp.billing.Budget;

  constructor(name: string, args: ProjectBudgetArgs, opts?: pulumi.ComponentResourceOptions) {
    super("sandbox:gcp:ProjectBudget", name, {}, opts);
    // Budgets filter by project number, not id.
    const project = gcp.organizations.getProjectOutput({ projectId: args.project }, { parent: this });
    this.budget = new gcp.billing.Budget(
      `${name}-budget`,
      {
        billingAccount: args.billingAccount,
        displayName: `agent-sandbox ${args.project}`,
        budgetFilter: { projects: [pulumi.interpolate`projects/${project.number}`] },
        amount: { specifiedAmount: { currencyCode: args.currency, units: String(args.monthlyAmount) } },
        thresholdRules: [
          ...args.thresholds.map((thresholdPercent) => ({ thresholdPercent, spendBasis: "CURRENT_SPEND" })),
          { thresholdPercent: 1, spendBasis: "FORECASTED_SPEND" },
        ],
      },
      { parent: this },
    );
    this.registerOutputs({});
  }
}
