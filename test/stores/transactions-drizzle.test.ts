/** Effect and record in one drizzle transaction, on PostgreSQL and on MySQL (test/suites/orm-transactions.suite.ts). */
import { databaseAvailable, describeOrmTransactions } from '../suites/orm-transactions.suite.js';

describeOrmTransactions('drizzle', 'postgres', await databaseAvailable('postgres'));
describeOrmTransactions('drizzle', 'mysql', await databaseAvailable('mysql'));
